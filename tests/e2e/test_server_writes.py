"""The gateway's HTTP server on a real socket: heads held for their body never stall a client."""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

import orjson

from levergate.upstreams.simulator import SimHandle
from tests.e2e.conftest import GatewayFactory

BODY = orjson.dumps(
    {"model": "sim-small", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
)


async def read_response(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    return head, await reader.readexactly(length)


def post_head(*extra: bytes) -> bytes:
    lines = [b"POST /v1/chat/completions HTTP/1.1", b"host: x", b"content-type: application/json",
             *extra, b"content-length: %d" % len(BODY)]  # fmt: skip
    return b"\r\n".join(lines) + b"\r\n\r\n"


async def connect(url: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    port = urlsplit(url).port
    assert port is not None
    return await asyncio.open_connection("127.0.0.1", port)


async def test_expect_100_continue_is_answered_before_the_body_is_sent(
    sim: SimHandle, gateway_at: GatewayFactory
) -> None:
    async with gateway_at(sim.base_url) as url:
        reader, writer = await connect(url)
        writer.write(post_head(b"expect: 100-continue"))
        interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        assert interim.startswith(b"HTTP/1.1 100 ")
        writer.write(BODY)
        head, body = await asyncio.wait_for(read_response(reader), 10)
        assert head.startswith(b"HTTP/1.1 200 ")
        assert orjson.loads(body)["object"] == "chat.completion"
        writer.close()


async def test_pipelined_and_head_requests_on_one_connection(
    sim: SimHandle, gateway_at: GatewayFactory
) -> None:
    async with gateway_at(sim.base_url) as url:
        reader, writer = await connect(url)
        post = post_head() + BODY
        writer.write(post + b"HEAD /healthz HTTP/1.1\r\nhost: x\r\n\r\n" + post)
        first = await asyncio.wait_for(read_response(reader), 10)
        head_only = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        third = await asyncio.wait_for(read_response(reader), 10)
        assert first[0].startswith(b"HTTP/1.1 200 ")
        assert third[0].startswith(b"HTTP/1.1 200 ")
        assert head_only.startswith(b"HTTP/1.1 200 ")
        assert orjson.loads(first[1])["object"] == orjson.loads(third[1])["object"]
        writer.close()
