"""One peer's idle sockets no longer take the connection cap from everyone (a real gateway on
loopback): a hostile peer (from 127.0.0.2) opens many connections and sends nothing, while a
normal client (from 127.0.0.1) opens a new connection per request. Every request of the normal
client is answered 200; the hostile peer's surplus is shed or answered 503 by name."""

from __future__ import annotations

import asyncio
import contextlib
from urllib.parse import urlsplit

import pytest

from levergate.simulator import SimHandle
from tests.e2e.conftest import GatewayFactory
from tests.e2e.raw_http import MARGIN, read_error, read_response

HEALTH = b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n"


async def open_from(url: str, source: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    port = urlsplit(url).port
    return await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))


async def normal_requests(url: str, count: int) -> list[bytes]:
    """Status lines of `count` requests, each on a new connection from 127.0.0.1, all kept
    open (kept alive) until the last has been answered."""
    statuses, kept = [], []
    for _ in range(count):
        reader, writer = await open_from(url, "127.0.0.1")
        kept.append(writer)
        writer.write(HEALTH)
        head, _ = await asyncio.wait_for(read_response(reader), MARGIN)
        statuses.append(head.split(b"\r\n", 1)[0])
    for writer in kept:
        writer.close()
    return statuses


async def test_a_peers_idle_sockets_leave_the_cap_to_others(
    sim: SimHandle, gateway_at: GatewayFactory
) -> None:
    server = {"max_connections": 50, "max_connections_per_peer": 20,
              "shed_idle_after_seconds": 60}  # fmt: skip
    async with gateway_at(sim.base_url, server=server) as url:
        hostile = [await open_from(url, "127.0.0.2") for _ in range(100)]
        assert await normal_requests(url, 20) == [b"HTTP/1.1 200 OK"] * 20
        over = [(r, w) for r, w in hostile if not r.at_eof()][-1]  # one still open, over the limit
        over[1].write(HEALTH)
        status, error = await read_error(over[0], within=MARGIN)
        assert (status, error["code"]) == (503, "too_many_connections_from_peer")
        for _, writer in hostile:
            writer.close()


@pytest.mark.parametrize("peer_limit", [0])
async def test_silent_connections_are_shed_at_the_cap(
    sim: SimHandle, gateway_at: GatewayFactory, peer_limit: int
) -> None:
    server = {"max_connections": 20, "max_connections_per_peer": peer_limit,
              "shed_idle_after_seconds": 0.2}  # fmt: skip
    async with gateway_at(sim.base_url, server=server) as url:
        idle = [await open_from(url, "127.0.0.2") for _ in range(20)]
        await asyncio.sleep(0.3)  # older than shed_idle_after_seconds: sheddable
        assert await normal_requests(url, 10) == [b"HTTP/1.1 200 OK"] * 10
        shed = 0
        for reader, writer in idle:
            with contextlib.suppress(TimeoutError):
                shed += await asyncio.wait_for(reader.read(), 0.5) == b""
            writer.close()
        assert shed == 10  # one per newcomer, the oldest first
