"""What the edge counts as a client request in flight (core/interactive.py), which the batch
runner yields to: a model call while it is answered, not while its body is still arriving, and
never an upload (a streamed body), so one client stalling its body holds back no tenant's
batches. Driven through the in-process transport with routes of the test's own."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx

from levergate.config import Settings
from levergate.gateway import Gateway
from levergate.server.edge import Edge
from levergate.server.exchange import Request, Response
from levergate.server.guards import client_key
from levergate.server.route import Route
from levergate.server.transport import GatewayTransport


class Seen:
    """A handler that notes how many client requests were in flight while it ran."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.in_flight: list[int] = []

    async def __call__(self, _edge: Edge, request: Request) -> Response:
        if request.chunks is not None:
            async for _chunk in request.chunks:
                self.in_flight.append(self.gateway.interactive.in_flight)
        self.in_flight.append(self.gateway.interactive.in_flight)
        return Response(200, [("content-type", "text/plain")], b"ok")


async def stalled(gate: asyncio.Event) -> AsyncIterator[bytes]:
    """A body whose first half arrives at once and whose rest waits for `gate`."""
    yield b'{"a": '
    await gate.wait()
    yield b"1}"


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_a_call_counts_while_answered_not_while_its_body_arrives() -> None:
    async with Gateway(Settings.for_upstream("http://127.0.0.1:9/v1")) as gateway:
        seen = Seen(gateway)
        routes = (Route("POST", "/v1/seen", seen, guard=client_key),)
        transport = GatewayTransport(gateway, routes=routes)
        async with httpx.AsyncClient(transport=transport, base_url="http://lg") as client:
            gate = asyncio.Event()
            sending = asyncio.create_task(client.post("/v1/seen", content=stalled(gate)))
            await settle()
            assert gateway.interactive.in_flight == 0  # its body is still arriving
            gate.set()
            assert (await sending).status_code == 200
            assert seen.in_flight == [1]
            assert gateway.interactive.in_flight == 0


async def test_an_upload_never_counts() -> None:
    async with Gateway(Settings.for_upstream("http://127.0.0.1:9/v1")) as gateway:
        seen = Seen(gateway)
        routes = (Route("POST", "/v1/upload", seen, guard=client_key, stream=True),)
        transport = GatewayTransport(gateway, routes=routes)
        async with httpx.AsyncClient(transport=transport, base_url="http://lg") as client:
            gate = asyncio.Event()
            sending = asyncio.create_task(client.post("/v1/upload", content=stalled(gate)))
            await settle()
            gate.set()
            assert (await sending).status_code == 200
            assert seen.in_flight
            assert set(seen.in_flight) == {0}
