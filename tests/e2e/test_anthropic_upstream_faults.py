"""A `kind: anthropic` upstream that misbehaves: streams cut by the simulator, and a scripted
raw-socket server (in the manner of hostile_upstream.py) that sends an `error` event
mid-stream, echoes the gateway's key in an error body, and answers 200 with something that is
not a message. The client (the official OpenAI SDK) sees errors, never the key."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import openai
import orjson
import pytest

from levergate.config import Settings
from levergate.gateway import Gateway
from levergate.server.run import serving
from levergate.simulator import SimSettings, run_simulator

KEY = "sk-ant-secret-key-0123456789abcdef"
HELLO: Any = [{"role": "user", "content": "hi"}]


@asynccontextmanager
async def gateway_to(root_url: str, **values: Any) -> AsyncIterator[openai.AsyncOpenAI]:
    settings = Settings.load(
        upstreams=[{"kind": "anthropic", "name": "a", "base_url": root_url, "api_key": KEY}],
        models=[{"name": "*", "upstream": "a"}],  # the model name picks the behaviour
        server={"port": 0},
        **values,
    )
    async with (
        Gateway(settings) as gateway,
        serving(gateway) as url,
        openai.AsyncOpenAI(base_url=url, api_key="unused", max_retries=0) as client,
    ):
        yield client


def _event(kind: str, data: dict[str, Any]) -> bytes:
    return b"event: %s\ndata: %s\n\n" % (kind.encode(), orjson.dumps({"type": kind, **data}))


START = _event(
    "message_start",
    {
        "message": {
            "id": "msg_x",
            "type": "message",
            "role": "assistant",
            "model": "m",
            "content": [],
            "usage": {"input_tokens": 3, "output_tokens": 1},
        }
    },
)


async def _scripted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            await _answer(reader, writer)
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def _answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    pairs = (line.partition(":") for line in lines[1:] if line)
    headers = {k.strip().lower(): v.strip() for k, _, v in pairs}
    body = orjson.loads(await reader.readexactly(int(headers["content-length"])))
    status, kind, payload = _script(body["model"], headers)
    writer.write(b"HTTP/1.1 %d X\r\ncontent-type: %s\r\n" % (status, kind))
    writer.write(b"content-length: %d\r\n\r\n%s" % (len(payload), payload))
    await writer.drain()


def _script(model: str, headers: dict[str, str]) -> tuple[int, bytes, bytes]:
    """(status, content type, body) of the behaviour the model name asks for."""
    if model == "echo-key":
        error = {"type": "invalid_request_error", "message": f"bad key {headers['x-api-key']}"}
        return 400, b"application/json", orjson.dumps({"type": "error", "error": error})
    if model == "not-a-message":
        return 200, b"application/json", b'{"type": "completion", "completion": "hi"}'
    if model == "key-200":
        content = [{"type": "text", "text": f"your key: {headers['x-api-key']}"}]
        return 200, b"application/json", orjson.dumps({
            "id": "msg_k", "type": "message", "role": "assistant", "model": "m",
            "content": content, "stop_reason": "end_turn",
            "usage": {"input_tokens": 3, "output_tokens": 5}})  # fmt: skip
    if model == "key-stream":
        return 200, b"text/event-stream", _key_stream(headers["x-api-key"])
    # A stream that fails after its first text delta.
    text: dict[str, Any] = {"index": 0, "content_block": {"type": "text", "text": ""}}
    delta = {"index": 0, "delta": {"type": "text_delta", "text": "Hel"}}
    failure: dict[str, Any] = {
        "error": {"type": "overloaded_error", "message": f"Overloaded {KEY}"}
    }
    stream = (
        START
        + _event("content_block_start", text)
        + _event("content_block_delta", delta)
        + _event("error", failure)
    )
    return 200, b"text/event-stream", stream


def _key_stream(key: str) -> bytes:
    """A whole stream whose text carries the key split across two deltas."""
    text: dict[str, Any] = {"index": 0, "content_block": {"type": "text", "text": ""}}
    halves = [{"index": 0, "delta": {"type": "text_delta", "text": part}}
              for part in ("your key: " + key[:12], key[12:] + ".")]  # fmt: skip
    end = {"delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 5}}
    return (
        START + _event("content_block_start", text)
        + b"".join(_event("content_block_delta", half) for half in halves)
        + _event("content_block_stop", {"index": 0}) + _event("message_delta", end)
        + _event("message_stop", {})
    )  # fmt: skip


@pytest.fixture
async def scripted() -> AsyncIterator[str]:
    server = await asyncio.start_server(_scripted, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        yield f"http://127.0.0.1:{port}"


async def test_an_error_event_mid_stream_reaches_the_client_without_the_key(scripted: str) -> None:
    async with gateway_to(scripted, traffic={"retry": {"enabled": False}}) as client:
        stream = await client.chat.completions.create(model="claude", messages=HELLO, stream=True)
        seen: list[str] = []
        with pytest.raises(openai.APIError) as caught:
            await _drain(stream, seen)
        assert "Hel" in seen
        assert "Overloaded" in caught.value.message
        assert KEY not in caught.value.message


async def test_an_echoed_key_is_redacted_and_a_foreign_body_is_a_502(scripted: str) -> None:
    async with gateway_to(scripted) as client:
        with pytest.raises(openai.BadRequestError) as bad:
            await client.chat.completions.create(model="echo-key", messages=HELLO)
        assert KEY not in str(bad.value.body)
        assert "bad key" in bad.value.message
        with pytest.raises(openai.APIStatusError) as foreign:
            await client.chat.completions.create(model="not-a-message", messages=HELLO)
        assert foreign.value.status_code == 502


async def test_a_cut_stream_ends_in_an_error() -> None:
    async with run_simulator(
        SimSettings.model_validate({"port": 0, "faults": {"disconnect_rate": 1.0}})
    ) as sim:
        retry = {"budget_min_per_second": 20, "max_attempts": 3, "base_seconds": 0.01}
        async with gateway_to(sim.root_url, traffic={"retry": retry}) as client:
            # Before the first byte a 502, after it an error event: an error either way.
            with pytest.raises(openai.APIError):
                await _drain(
                    await client.chat.completions.create(
                        model="claude", messages=HELLO, stream=True, max_tokens=20
                    ),
                    [],
                )
        # Cut after `message_start`, whose role chunk had already passed Retry: the stream
        # had begun, so it is not started over (as for an OpenAI-compatible upstream).
        assert sim.stats()["faults_injected"] == {"disconnect": 1}


async def _drain(stream: Any, seen: list[str]) -> None:
    async for chunk in stream:
        seen.append(chunk.choices[0].delta.content or "")  # noqa: PERF401 - until it fails


async def test_a_key_in_a_200_answer_is_scrubbed_whole_and_streamed(scripted: str) -> None:
    async with gateway_to(scripted) as client:
        whole = await client.chat.completions.create(model="key-200", messages=HELLO)
        assert whole.choices[0].message.content == "your key: [redacted]"
        seen: list[str] = []
        stream = await client.chat.completions.create(model="key-stream", messages=HELLO,
                                                      stream=True)  # fmt: skip
        await _drain(stream, seen)
        assert "".join(seen) == "your key: [redacted]."
