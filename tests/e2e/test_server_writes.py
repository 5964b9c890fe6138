"""The gateway's HTTP server on a real socket: heads held for their body never stall a client."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from levergate.simulator import SimHandle
from tests.e2e.conftest import GatewayFactory
from tests.e2e.raw_http import BODY, MARGIN, connect, post_head, read_error, read_response


@pytest.mark.parametrize(
    "expect",
    [
        (b"expect: 100-continue",),
        (b"Expect: 100-Continue \t",),  # any case, trailing whitespace
        (b"expect: 100-continue", b"expect: something-else"),  # any of them (as uvicorn)
    ],
)
async def test_expect_100_continue_is_answered_before_the_body_is_sent(
    sim: SimHandle, gateway_at: GatewayFactory, expect: tuple[bytes, ...]
) -> None:
    async with gateway_at(sim.base_url) as url:
        reader, writer = await connect(url)
        writer.write(post_head(*expect))
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


async def test_a_head_request_alone_is_answered_at_once(
    sim: SimHandle, gateway_at: GatewayFactory
) -> None:
    # A HEAD answer has no body write to carry its held head: it used to wait forever.
    async with gateway_at(sim.base_url) as url:
        reader, writer = await connect(url)
        writer.write(b"HEAD /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), MARGIN)
        assert head.startswith(b"HTTP/1.1 200 ")
        assert b"content-length: 15\r\n" in head
        # No body followed it: the next answer on the connection starts right after the head.
        writer.write(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        _, body = await asyncio.wait_for(read_response(reader), MARGIN)
        assert orjson.loads(body) == {"status": "ok"}
        writer.close()


async def test_garbage_pipelined_after_a_valid_request_gets_a_400_after_its_answer(
    sim: SimHandle, gateway_at: GatewayFactory
) -> None:
    async with gateway_at(sim.base_url) as url:
        reader, writer = await connect(url)
        writer.write(post_head() + BODY + b"GARBAGE \x01\x02 nonsense\r\n\r\n")
        head, body = await asyncio.wait_for(read_response(reader), MARGIN)
        assert head.startswith(b"HTTP/1.1 200 ")
        assert orjson.loads(body)["object"] == "chat.completion"
        status, error = await read_error(reader, within=MARGIN)
        assert status == 400
        assert error["type"] == "invalid_request_error"
        writer.close()


async def test_an_http_1_0_client_gets_a_stream_unchunked_and_then_the_close(
    sim: SimHandle, gateway_at: GatewayFactory
) -> None:
    # HTTP/1.0 has no chunked encoding: the body is the bytes up to the close.
    stream = orjson.dumps({**orjson.loads(BODY), "stream": True})
    async with gateway_at(sim.base_url) as url:
        reader, writer = await connect(url)
        writer.write(post_head(body=stream, version=b"HTTP/1.0") + stream)
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), MARGIN)
        body = await asyncio.wait_for(reader.read(), MARGIN)  # to the end of the connection
        assert head.startswith(b"HTTP/1.1 200 ")
        assert b"transfer-encoding" not in head.lower()
        assert b"connection: close\r\n" in head
        events = [e for e in body.split(b"\n\n") if e]
        assert all(e.startswith(b"data: ") for e in events)
        assert events[-1] == b"data: [DONE]"
        assert len(events) >= 3
        writer.close()


async def test_an_http_1_0_client_gets_a_whole_answer_and_then_the_close(
    sim: SimHandle, gateway_at: GatewayFactory
) -> None:
    async with gateway_at(sim.base_url) as url:
        reader, writer = await connect(url)
        writer.write(post_head(version=b"HTTP/1.0") + BODY)
        head, body = await asyncio.wait_for(read_response(reader), MARGIN)
        assert b"connection: close\r\n" in head
        assert orjson.loads(body)["object"] == "chat.completion"
        assert await asyncio.wait_for(reader.read(), MARGIN) == b""
        writer.close()
