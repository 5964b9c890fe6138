"""The limits a client meets at the gateway's HTTP server, on a real socket: request-head size
and count (431), slow heads and bodies (408), idle connections closed, and a connection cap
answered with a 503 and one log line. Each answer is OpenAI-shaped JSON, then the close."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

import orjson
import pytest

from levergate.simulator import SimHandle
from tests.e2e.conftest import GatewayFactory
from tests.e2e.raw_http import BODY, MARGIN, connect, post_head, read_error, read_response

HEALTH = b"GET /healthz HTTP/1.1\r\nhost: x\r\n"


def headers(count: int, size: int = 1) -> bytes:
    return b"".join(b"x-h%d: %s\r\n" % (i, b"v" * size) for i in range(count))


@contextlib.asynccontextmanager
async def trickling(writer: asyncio.StreamWriter, byte: bytes, every: float) -> AsyncIterator[None]:
    """Send `byte` every `every` seconds until the block ends (or the server closes)."""

    async def trickle() -> None:
        with contextlib.suppress(ConnectionError):
            while True:
                await asyncio.sleep(every)
                writer.write(byte)
                await writer.drain()

    task = asyncio.create_task(trickle())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_one_megabyte_header_is_431_and_the_connection_closed(
    sim: SimHandle, gateway_at: GatewayFactory
) -> None:
    async with gateway_at(sim.base_url) as url:
        reader, writer = await connect(url)
        writer.write(HEALTH + b"x-big: " + b"a" * 1_000_000 + b"\r\n\r\n")
        status, error = await read_error(reader, within=MARGIN)
        assert status == 431
        assert error["code"] == "request_header_fields_too_large"
        writer.close()


async def test_a_head_just_over_the_byte_limit_is_431(
    sim: SimHandle, gateway_at: GatewayFactory
) -> None:
    async with gateway_at(sim.base_url, server={"max_header_bytes": 8192}) as url:
        reader, writer = await connect(url)
        writer.write(HEALTH + headers(9, size=1000) + b"\r\n")  # ~9.1 KB, likely one read
        status, _ = await read_error(reader, within=MARGIN)
        assert status == 431
        writer.close()


async def test_more_headers_than_the_limit_is_431(
    sim: SimHandle, gateway_at: GatewayFactory
) -> None:
    async with gateway_at(sim.base_url) as url:
        reader, writer = await connect(url)
        writer.write(HEALTH + headers(100) + b"\r\n")  # with host: 101
        status, _ = await read_error(reader, within=MARGIN)
        assert status == 431
        writer.close()


async def test_a_head_within_both_limits_is_served(
    sim: SimHandle, gateway_at: GatewayFactory
) -> None:
    async with gateway_at(sim.base_url) as url:
        reader, writer = await connect(url)
        big = headers(97, size=600)  # ~60 KB in 97 lines, under 64 KiB and 100 headers
        writer.write(post_head(big.rstrip(b"\r\n")) + BODY)
        head, body = await asyncio.wait_for(read_response(reader), MARGIN)
        assert head.startswith(b"HTTP/1.1 200 ")
        assert orjson.loads(body)["object"] == "chat.completion"
        writer.close()


async def test_a_head_sent_a_byte_at_a_time_is_408_after_the_head_timeout(
    sim: SimHandle, gateway_at: GatewayFactory
) -> None:
    async with gateway_at(sim.base_url, server={"head_timeout_seconds": 0.5}) as url:
        reader, writer = await connect(url)
        writer.write(HEALTH)
        async with trickling(writer, b"x", every=0.1):
            status, error = await read_error(reader, within=0.5 + MARGIN)
        assert status == 408
        assert error["code"] == "request_timeout"
        writer.close()


async def test_a_slow_head_on_a_kept_alive_connection_is_408_too(
    sim: SimHandle, gateway_at: GatewayFactory
) -> None:
    async with gateway_at(sim.base_url, server={"head_timeout_seconds": 0.5}) as url:
        reader, writer = await connect(url)
        writer.write(HEALTH + b"\r\n")
        head, _ = await asyncio.wait_for(read_response(reader), MARGIN)
        assert head.startswith(b"HTTP/1.1 200 ")
        writer.write(HEALTH)
        async with trickling(writer, b"x", every=0.1):
            status, _ = await read_error(reader, within=0.5 + MARGIN)
        assert status == 408
        writer.close()


async def test_a_connection_that_sends_nothing_is_closed_after_the_head_timeout(
    sim: SimHandle, gateway_at: GatewayFactory
) -> None:
    async with gateway_at(sim.base_url, server={"head_timeout_seconds": 0.5}) as url:
        reader, writer = await connect(url)
        assert await asyncio.wait_for(reader.read(), 0.5 + MARGIN) == b""
        writer.close()


async def test_an_idle_keep_alive_connection_is_closed_after_its_timeout(
    sim: SimHandle, gateway_at: GatewayFactory
) -> None:
    async with gateway_at(sim.base_url, server={"keep_alive_timeout_seconds": 0.5}) as url:
        reader, writer = await connect(url)
        writer.write(HEALTH + b"\r\n")
        head, _ = await asyncio.wait_for(read_response(reader), MARGIN)
        assert head.startswith(b"HTTP/1.1 200 ")
        assert await asyncio.wait_for(reader.read(), 0.5 + MARGIN) == b""
        writer.close()


async def test_a_connection_in_use_outlives_its_keep_alive_timeout(
    sim: SimHandle, gateway_at: GatewayFactory
) -> None:
    """Requests each well within the keep-alive timeout of the last, over longer than it: the
    connection's one keep-alive timer fires while it is idle but not for long, waits out the
    rest, and closes it only once it has been idle for the whole timeout."""
    async with gateway_at(sim.base_url, server={"keep_alive_timeout_seconds": 1.0}) as url:
        reader, writer = await connect(url)
        for _ in range(4):  # 1.2 s of requests 0.4 s apart
            writer.write(HEALTH + b"\r\n")
            head, _ = await asyncio.wait_for(read_response(reader), MARGIN)
            assert head.startswith(b"HTTP/1.1 200 ")
            await asyncio.sleep(0.4)
        assert await asyncio.wait_for(reader.read(), 1.0 + MARGIN) == b""
        writer.close()


async def test_a_body_that_trickles_is_408(sim: SimHandle, gateway_at: GatewayFactory) -> None:
    slow = {"body_timeout_seconds": 0.5, "body_min_bytes_per_second": 100}
    async with gateway_at(sim.base_url, server=slow) as url:
        reader, writer = await connect(url)
        writer.write(post_head(body=b" " * 4000) + b"{")
        async with trickling(writer, b" ", every=0.1):  # 10 bytes/s, under the 100 asked for
            status, error = await read_error(reader, within=0.5 + MARGIN)
        assert status == 408
        assert error["code"] == "request_timeout"
        writer.close()


async def test_a_body_that_stops_is_408(sim: SimHandle, gateway_at: GatewayFactory) -> None:
    async with gateway_at(sim.base_url, server={"body_timeout_seconds": 0.5}) as url:
        reader, writer = await connect(url)
        writer.write(post_head() + BODY[:10])
        status, _ = await read_error(reader, within=0.5 + MARGIN)
        assert status == 408
        writer.close()


async def test_connections_over_the_cap_get_a_503_and_one_log_line(
    sim: SimHandle, gateway_at: GatewayFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="levergate.server")
    server = {"max_connections": 2, "shed_idle_after_seconds": 60}  # young: never shed
    async with gateway_at(sim.base_url, server=server) as url:
        idle = [await connect(url) for _ in range(2)]
        for _ in range(3):
            reader, writer = await connect(url)
            writer.write(HEALTH + b"\r\n")
            status, error = await read_error(reader, within=MARGIN)
            assert status == 503
            assert error["code"] == "too_many_connections"
            writer.close()
        for _, writer in idle:
            writer.close()
            await writer.wait_closed()
        assert await asyncio.wait_for(served_again(url), MARGIN)
    lines = [r for r in caplog.records if "connection cap" in r.getMessage()]
    assert len(lines) == 1


async def served_again(url: str) -> bool:
    """Once the server has seen the idle connections close, a new one is served."""
    while True:
        reader, writer = await connect(url)
        writer.write(HEALTH + b"\r\n")
        head, _ = await read_response(reader)
        writer.close()
        if head.startswith(b"HTTP/1.1 200 "):
            return True
        await asyncio.sleep(0.05)
