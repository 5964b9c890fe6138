"""`levergate sim` as a real process on a free loopback port, driven by the OpenAI SDK."""

from __future__ import annotations

import asyncio
import re
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

LEVERGATE = Path(sys.executable).parent / "levergate"
USER: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Hello from a subprocess."}]


@asynccontextmanager
async def sim_process(*flags: str) -> AsyncIterator[str]:
    """Start `levergate sim --port 0 ...`, read the announced URL, stop it with SIGTERM."""
    command = (
        [str(LEVERGATE)] if LEVERGATE.exists() else [sys.executable, "-m", "levergate.cli.main"]
    )
    process = await asyncio.create_subprocess_exec(
        *command, "sim", "--port", "0", *flags,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert process.stdout is not None
    try:
        line = (await asyncio.wait_for(process.stdout.readline(), 30)).decode()
        assert "SIMULATED" in line, line
        match = re.search(r"(http://\S+/v1)", line)
        assert match, line
        yield match.group(1)
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(process.wait(), 30)
        assert code == 0


async def test_cli_simulator_serves_the_sdk() -> None:
    async with (
        sim_process("--seed", "3", "--rpm", "3", "--max-tokens-default", "5") as url,
        openai.AsyncOpenAI(base_url=url, api_key="sk-sub", max_retries=0, timeout=10) as sdk,
    ):
        raw = await sdk.chat.completions.with_raw_response.create(model="sim-small", messages=USER)
        assert raw.headers["x-simulated"] == "levergate-sim"
        assert raw.headers["x-ratelimit-limit-requests"] == "3"
        completion = raw.parse()
        assert completion.usage is not None
        assert completion.usage.completion_tokens == 5
        stream = await sdk.chat.completions.create(model="sim-small", messages=USER, stream=True)
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        assert text == completion.choices[0].message.content
        await sdk.embeddings.create(model="sim-embed", input="x")  # an RPM slot too
        with pytest.raises(openai.RateLimitError) as caught:
            await sdk.chat.completions.create(model="sim-small", messages=USER)
        assert "retry-after-ms" in caught.value.response.headers
        async with httpx.AsyncClient() as http:
            stats = (await http.get(url.removesuffix("/v1") + "/sim/stats")).json()
        assert stats["rate_limited"] == 1
        assert stats["requests_by_key"] == {"sk-sub": 4}


@pytest.mark.slow
async def test_cli_with_two_workers_answers() -> None:
    async with sim_process("--workers", "2") as url, httpx.AsyncClient(timeout=10) as http:
        for _ in range(4):
            response = await http.post(
                url + "/chat/completions", json={"model": "m", "messages": USER}
            )
            assert response.status_code == 200
            assert response.headers["x-simulated"] == "levergate-sim"
