"""Canary secrets on the success path: an upstream that puts the key it was sent into its 200
answers — in the text, JSON-escaped (`\\u0063\\u006e…`), split across two stream events and
spread over many, in an embeddings answer's `model` — while a real gateway on loopback serves
every product built from such answers: chat whole and streamed, embeddings, Responses and its
stored copy, Anthropic Messages, a batch's output file, an async request's result and its
webhook body. No canary may reach any of them, nor a log line (a webhook URL's `?token=`)."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from aiohttp import web

from tests.e2e.conftest import GatewayFactory
from tests.e2e.test_async_requests import SECRET, Receiver, until_done
from tests.e2e.test_batch_api import batch_settings, jsonl

KEY = f"cnry-key-{uuid.uuid4().hex}"
TOKEN = f"cnry-token-{uuid.uuid4().hex}"
HEADERS = {"x-levergate-tenant": "acme"}


def escaped(text: str) -> str:
    """`text` as a JSON string body with every character escaped (`\\u0063\\u006e...`)."""
    return "".join(f"\\u{ord(c):04x}" for c in text)


def chunk(content: str) -> bytes:
    choice = {"index": 0, "delta": {"content": content}, "finish_reason": None}
    event = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
             "choices": [choice]}  # fmt: skip
    return b"data: " + orjson.dumps(event) + b"\n\n"


def pieces(key: str, mode: str) -> list[str]:
    """How the streamed answer carries the key: in two events, or three characters an event."""
    if mode == "split":
        return ["your key is " + key[:15], key[15:] + "."]
    return ["your key is ", *(key[i : i + 3] for i in range(0, len(key), 3)), "."]


async def _chat(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    key = request.headers["authorization"].removeprefix("Bearer ")
    mode = str(body.get("model", "")).rsplit("-", 1)[-1]
    if body.get("stream"):
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        for piece in pieces(key, mode):
            await response.write(chunk(piece))
        usage = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
                 "choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 9,
                                          "total_tokens": 10}}  # fmt: skip
        await response.write(b"data: " + orjson.dumps(usage) + b"\n\ndata: [DONE]\n\n")
        return response
    content = f"your key is {escaped(key) if mode == 'escaped' else key}."
    raw = (
        '{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,'
        f'"message":{{"role":"assistant","content":"{content}"}},"finish_reason":"stop"}}],'
        '"usage":{"prompt_tokens":1,"completion_tokens":9,"total_tokens":10}}'
    )
    return web.Response(body=raw.encode(), content_type="application/json")


async def _embeddings(request: web.Request) -> web.Response:
    key = request.headers["authorization"].removeprefix("Bearer ")
    return web.json_response({"object": "list", "model": f"debug {key}",
                              "data": [{"object": "embedding", "index": 0,
                                        "embedding": [0.25, 0.5]}],
                              "usage": {"prompt_tokens": 1, "total_tokens": 1}})  # fmt: skip


@pytest.fixture
async def echo_url() -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", _chat)
    app.router.add_post("/v1/embeddings", _embeddings)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}/v1"
    await runner.cleanup()


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    found = Receiver(fail_first=0)
    server = await asyncio.start_server(found.handle, "127.0.0.1", 0)
    found.port = server.sockets[0].getsockname()[1]
    async with server:
        yield found


def settings(echo: str, tmp: Path, receiver: Receiver) -> dict[str, Any]:
    modes = ("plain", "escaped", "split", "drip")
    models = [{"name": f"echo-{mode}", "upstream": "echo"} for mode in modes]
    hook = f"http://127.0.0.1:{receiver.port}/hook?token={TOKEN}"
    return {
        "upstreams": [{"name": "echo", "base_url": echo, "api_key": KEY}],
        "models": [*models, {"name": "embed", "upstream": "echo"}],
        "batch": batch_settings(tmp),
        "async_requests": {"enabled": True},
        "webhooks": {"targets": {"ops": {"url": hook, "secret": SECRET}}},
        "responses": {"store": {"backend": "memory"}},
    }


async def streamed(http: httpx.AsyncClient, path: str, body: dict[str, Any]) -> str:
    """The stream's bytes, then the text its events carry joined up (a key split across
    events shows only there)."""
    async with http.stream("POST", path, json={**body, "stream": True}) as response:
        assert response.status_code == 200, await response.aread()
        raw = (await response.aread()).decode()
    events = [orjson.loads(line[6:]) for line in raw.splitlines()
              if line.startswith("data: {")]  # fmt: skip
    return raw + "\n" + "".join(_texts(event) for event in events)


def _texts(value: Any) -> str:
    """The generated text in a stream event of any of the three protocols, in order."""
    if isinstance(value, dict):
        return "".join(
            item if isinstance(item, str) and key in {"content", "text", "delta"} else _texts(item)
            for key, item in value.items()
        )
    if isinstance(value, list):
        return "".join(_texts(item) for item in value)
    return ""


def chat(model: str) -> dict[str, Any]:
    return {"model": model, "max_tokens": 9, "temperature": 0,
            "messages": [{"role": "user", "content": "key?"}]}  # fmt: skip


async def test_no_canary_leaves_on_the_success_path(
    echo_url: str, tmp_path: Path, receiver: Receiver, gateway_for: GatewayFactory,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    caplog.set_level(logging.INFO)
    seen: dict[str, str] = {}
    async with (
        gateway_for(**settings(echo_url, tmp_path, receiver)) as url,
        httpx.AsyncClient(base_url=url, headers=HEADERS, timeout=20) as http,
    ):
        for model in ("echo-plain", "echo-escaped"):
            seen[f"chat {model}"] = (await http.post("/chat/completions", json=chat(model))).text
            # Asked again: the exact cache's copy.
            again = await http.post("/chat/completions", json=chat(model))
            assert again.headers.get("x-levergate-cache") == "hit", again.headers
            seen[f"cached chat {model}"] = again.text
        for model in ("echo-split", "echo-drip"):
            seen[f"stream {model}"] = await streamed(http, "/chat/completions", chat(model))
        embedded = await http.post("/embeddings", json={"model": "embed", "input": "x"})
        seen["embeddings"] = embedded.text
        made = await http.post("/responses", json={"model": "echo-plain", "input": "key?"})
        seen["responses"] = made.text
        seen["stored response"] = (await http.get(f"/responses/{made.json()['id']}")).text
        drip = {"model": "echo-drip", "input": "key?"}
        seen["responses stream"] = await streamed(http, "/responses", drip)
        root = url.removesuffix("/v1")
        message = {"model": "echo-split", "max_tokens": 9,
                   "messages": [{"role": "user", "content": "key?"}]}  # fmt: skip
        seen["messages"] = (await http.post(f"{root}/v1/messages", json=message)).text
        seen["messages stream"] = await streamed(http, f"{root}/v1/messages", message)
        seen["batch output file"] = await batch_output(http)
        queued = await http.post("/async/chat/completions", json=chat("echo-plain"),
                                 headers={"x-levergate-webhook": "ops"})  # fmt: skip
        assert queued.status_code == 202, queued.text
        seen["async result"] = orjson.dumps(await until_done(url, queued.json()["id"])).decode()
        await asyncio.wait_for(receiver.arrived.wait(), 30)
        seen["webhook body"] = receiver.got[-1][1].decode()
    # At most the first HOLD_FROM - 1 characters go out before the window holds a stream.
    leaked = [name for name, text in seen.items()
              if KEY[9:25] in text or escaped(KEY)[:60] in text]  # fmt: skip
    assert not leaked, f"the key reached {len(leaked)} of {len(seen)} channels: {leaked}"
    for model in ("echo-plain", "echo-escaped"):
        answer = orjson.loads(seen[f"chat {model}"])["choices"][0]["message"]["content"]
        assert answer == "your key is [redacted]."
    assert all("[redacted]" in seen[f"stream {m}"] for m in ("echo-split", "echo-drip"))
    logged = [record.getMessage() for record in caplog.records]
    assert any("/hook" in line for line in logged), "the delivery was not logged: proves nothing"
    assert not [line for line in logged if TOKEN in line or KEY in line]


async def batch_output(http: httpx.AsyncClient) -> str:
    lines = [
        {"custom_id": f"l{i}", "method": "POST", "url": "/v1/chat/completions", "body": chat(model)}
        for i, model in enumerate(("echo-plain", "echo-escaped"))
    ]
    files: dict[str, tuple[str | None, bytes | str]] = {
        "file": ("in.jsonl", jsonl(lines)),
        "purpose": (None, "batch"),
    }
    uploaded = (await http.post("/files", files=files)).json()
    made = await http.post("/batches", json={"input_file_id": uploaded["id"],
                                             "endpoint": "/v1/chat/completions",
                                             "completion_window": "24h"})  # fmt: skip
    for _ in range(600):
        batch = (await http.get(f"/batches/{made.json()['id']}")).json()
        if batch["status"] == "completed":
            output = await http.get(f"/files/{batch['output_file_id']}/content")
            assert output.text.count("\n") == 2, output.text
            return output.text
        await asyncio.sleep(0.05)
    raise AssertionError("the batch never completed")
