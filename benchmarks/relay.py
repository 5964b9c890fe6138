"""A null proxy: relays TCP bytes between a client and an upstream and does nothing else.

The floor under any proxy that runs as its own process: what the extra hop costs on this machine
(a second socket pair, a second process to wake) before any HTTP is parsed. `overhead.py` runs
it beside the gateway so the gateway's added latency can be split into the hop and its own work.

    python benchmarks/relay.py --port 9000 --to 127.0.0.1:8000
"""

from __future__ import annotations

import argparse
import asyncio
import socket
from typing import cast

import uvloop


class _Pipe(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.peer: _Pipe | None = None
        self.pending: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast("asyncio.Transport", transport)  # uvloop's is not a subclass
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        peer = self.peer
        if peer is not None and peer.transport is not None:
            peer.transport.write(data)
        else:
            self.pending.append(data)

    def connection_lost(self, exc: Exception | None) -> None:  # noqa: ARG002 - protocol
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.close()


async def serve(port: int, host: str, upstream_port: int) -> None:
    loop = asyncio.get_running_loop()
    joining: set[asyncio.Task[None]] = set()

    async def accepted(downstream: _Pipe) -> None:
        _, upstream = await loop.create_connection(_Pipe, host, upstream_port)
        upstream.peer, downstream.peer = downstream, upstream
        for data in downstream.pending:
            upstream.transport.write(data)  # type: ignore[union-attr]
        downstream.pending.clear()

    def factory() -> _Pipe:
        pipe = _Pipe()
        task = loop.create_task(accepted(pipe))
        joining.add(task)
        task.add_done_callback(joining.discard)
        return pipe

    server = await loop.create_server(factory, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--to", required=True, help="host:port of the upstream")
    args = parser.parse_args()
    host, _, port = args.to.rpartition(":")
    uvloop.run(serve(args.port, host, int(port)))


if __name__ == "__main__":
    main()
