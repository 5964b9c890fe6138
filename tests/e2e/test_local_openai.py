"""The local engine behind the whole gateway, on loopback, driven by the official OpenAI SDK:
as a configured upstream (in-process server) and as the embedded default of a real
`levergate serve` process."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from levergate.config import Settings
from levergate.gateway import Gateway
from levergate.server.run import serving
from levergate.testing.ports import free_port
from tests.e2e.test_cli import wait_for

FRANCE: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "What is the capital of France?"}
]


@pytest.fixture
async def sdk(tmp_path: Path) -> AsyncIterator[openai.AsyncOpenAI]:
    local = {"kind": "local", "requantize": "off", "n_ctx": 2048, "slots": 4, "threads": 1,
             "cache_dir": str(tmp_path)}  # fmt: skip
    settings = Settings.load(
        server={"port": 0},
        upstreams=[local],
        models=[
            {"name": "*", "upstream": "local"},
            {"name": "smollm2", "upstream": "local"},
            {"name": "embed", "upstream": "local", "upstream_model": "all-minilm-l6-v2"},
        ],
    )
    async with (
        Gateway(settings) as gateway,
        serving(gateway) as url,
        openai.AsyncOpenAI(base_url=url, api_key="x", max_retries=0) as client,
    ):
        yield client


async def test_chat_streamed_and_not_through_the_gateway(sdk: openai.AsyncOpenAI) -> None:
    reply = await sdk.chat.completions.create(
        model="smollm2",
        messages=FRANCE,
        temperature=0,
        max_tokens=16,
    )
    text = reply.choices[0].message.content or ""
    assert "Paris" in text
    assert reply.usage is not None
    assert reply.usage.completion_tokens > 0
    stream = await sdk.chat.completions.create(
        model="smollm2",
        messages=FRANCE,
        temperature=0,
        max_tokens=16,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [chunk async for chunk in stream]
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == text
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == reply.usage.completion_tokens


async def test_embeddings_models_and_errors(sdk: openai.AsyncOpenAI) -> None:
    embedded = await sdk.embeddings.create(model="all-minilm-l6-v2", input=["bread", "loaf"])
    assert len(embedded.data) == 2
    assert len(embedded.data[0].embedding) == 384
    # Another embedding model's name is a 404, not 384 MiniLM dimensions under that name;
    # a configured alias maps a name of the operator's choosing onto the local model.
    with pytest.raises(openai.NotFoundError) as missing:
        await sdk.embeddings.create(model="text-embedding-3-small", input="bread")
    assert missing.value.code == "model_not_found"
    aliased = await sdk.embeddings.create(model="embed", input="bread")
    assert aliased.data[0].embedding == embedded.data[0].embedding
    names = {m.id async for m in sdk.models.list()}
    assert {"smollm2", "smollm2-135m-instruct", "all-minilm-l6-v2"} <= names
    with pytest.raises(openai.BadRequestError) as raised:
        await sdk.chat.completions.create(
            model="smollm2",
            messages=[{"role": "user", "content": "bread " * 3000}],
        )
    assert raised.value.code == "context_length_exceeded"
    # A client that goes away mid-stream leaves the engine able to answer the next one.
    stream = await sdk.chat.completions.create(
        model="smollm2",
        messages=FRANCE,
        max_tokens=200,
        stream=True,
    )
    async for _ in stream:
        break
    await stream.close()
    again = await sdk.completions.create(model="smollm2", prompt="Bread is", max_tokens=4)
    assert again.choices[0].text


async def test_levergate_serve_without_upstreams_serves_the_local_model(
    tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEVERGATE_")}
    env["XDG_CACHE_HOME"] = str(tmp_path)  # the re-quantized model goes here, not to ~/.cache
    log = tmp_path / "serve.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "levergate.cli.main", "serve", "--port", str(port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=sink,
        )
    processes.append(proc)
    wait_for(port, proc)
    async with openai.AsyncOpenAI(
        base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0
    ) as client:
        reply = await client.chat.completions.create(
            model="smollm2",
            messages=FRANCE,
            temperature=0,
            max_tokens=16,
        )
        assert "Paris" in (reply.choices[0].message.content or "")
    banner = log.read_text()
    assert "embedded llama.cpp engine" in banner
    assert "smollm2" in banner
    assert list((tmp_path / "levergate" / "models").glob("*.q8_0.gguf"))
    # The embedded default's exact cache is a file there too, so answers survive restarts.
    assert (tmp_path / "levergate" / "cache.sqlite3").is_file()
