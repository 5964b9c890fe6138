"""Running the ASGI app on a real socket.

uvicorn with uvloop and httptools was measured against the alternatives on this machine
(benchmarks/results/server_choice.md) and chosen for the lowest CPU per proxied request among
servers that can also be embedded in a running event loop, which the tests and the library need.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import uvicorn

from levergate.config import Server
from levergate.errors import ConfigError
from levergate.gateway import Gateway
from levergate.server.asgi import App
from levergate.server.http_protocol import HttpProtocol


def server_for(gateway: Gateway) -> uvicorn.Server:
    """A uvicorn server for the gateway; the caller's event loop runs it (uvloop is installed by
    the CLI before the loop starts)."""
    settings = gateway.settings.server
    config = uvicorn.Config(
        App(gateway),
        host=settings.host,
        port=settings.port,
        loop="none",
        http=HttpProtocol,
        ws="none",
        lifespan="on",
        access_log=settings.access_log,
        log_level=logging.WARNING,
        timeout_graceful_shutdown=int(settings.graceful_shutdown_seconds),
        server_header=False,
        # X-Forwarded-* rewriting costs ~5% of a request's CPU; behind a trusted proxy that
        # needs it, run uvicorn yourself with the ASGI app (`levergate.server.asgi.App`).
        proxy_headers=False,
        date_header=False,
        backlog=4096,
    )
    return uvicorn.Server(config)


def tune_process(settings: Server) -> None:
    """Process-wide tuning for a serving process, applied once start-up is done. Only the CLI
    calls this; a library user's process keeps its own settings.

    Garbage collector: the objects built so far (modules, settings, the pipeline) are moved out
    of the collector's sight, and young collections run less often. Measured with wrk at 64
    connections (benchmarks/results/overhead.md): about a quarter less CPU per request.
    CPU affinity (`cpus`): a gateway on its own core is not woken on a core another process
    just left idle. Measured at 50 ms upstream latency and concurrency 1 (overhead.md against
    overhead-pinned.md): added TTFT +0.57 ms pinned against +0.76 ms unpinned on the current
    code (it was ~1.0 against ~2.2 ms before the write changes of server.http_protocol)."""
    if settings.cpus:
        try:
            os.sched_setaffinity(0, settings.cpus)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"server.cpus {settings.cpus}: cannot pin to them ({exc})") from None
    if settings.gc_freeze:
        gc.collect()
        gc.freeze()
    if settings.gc_gen0_threshold:
        _, gen1, gen2 = gc.get_threshold()
        gc.set_threshold(settings.gc_gen0_threshold, gen1, gen2)


@asynccontextmanager
async def serving(gateway: Gateway, *, process_wide: bool = False) -> AsyncIterator[str]:
    """Serve `gateway` on its configured host and port (0 picks a free one) inside the running
    loop; yields the base URL (`http://host:port/v1`). Used by tests and `levergate serve`,
    which passes `process_wide=True` to also tune the garbage collector once started."""
    server = server_for(gateway)
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if task.done():
                await task  # surfaces the bind error
                raise OSError("the server stopped before it started")
            await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        if process_wide:
            tune_process(gateway.settings.server)
        yield f"http://{gateway.settings.server.host}:{port}/v1"
    finally:
        server.should_exit = True
        await task
