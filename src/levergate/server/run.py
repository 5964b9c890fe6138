"""Running the ASGI app on a real socket.

uvicorn with uvloop and httptools was measured against the alternatives on this machine
(benchmarks/results/server_choice.md) and chosen for the lowest CPU per proxied request among
servers that can also be embedded in a running event loop, which the tests and the library need.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import uvicorn

from levergate.gateway import Gateway
from levergate.server.asgi import App


def server_for(gateway: Gateway) -> uvicorn.Server:
    """A uvicorn server for the gateway; the caller's event loop runs it (uvloop is installed by
    the CLI before the loop starts)."""
    settings = gateway.settings.server
    config = uvicorn.Config(
        App(gateway),
        host=settings.host,
        port=settings.port,
        loop="none",
        http="httptools",
        ws="none",
        lifespan="on",
        access_log=settings.access_log,
        log_level=logging.WARNING,
        timeout_graceful_shutdown=int(settings.graceful_shutdown_seconds),
        server_header=False,
        date_header=False,
        backlog=4096,
    )
    return uvicorn.Server(config)


@asynccontextmanager
async def serving(gateway: Gateway) -> AsyncIterator[str]:
    """Serve `gateway` on its configured host and port (0 picks a free one) inside the running
    loop; yields the base URL (`http://host:port/v1`). Used by tests and `levergate serve`."""
    server = server_for(gateway)
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if task.done():
                await task  # surfaces the bind error
                raise OSError("the server stopped before it started")
            await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://{gateway.settings.server.host}:{port}/v1"
    finally:
        server.should_exit = True
        await task
