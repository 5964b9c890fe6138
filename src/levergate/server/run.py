"""Running the ASGI app on a real socket.

uvicorn with uvloop and httptools was measured against the alternatives on this machine
(benchmarks/results/server_choice.md) and chosen for the lowest CPU per proxied request among
servers that can also be embedded in a running event loop, which the tests and the library need.
The client limits (`config.Server`) are enforced in its protocol (server.http_protocol); this
module fits the connection cap to the descriptor limit and, at shutdown, ends what outlasts the
grace period with a `shutting_down` error instead of letting uvicorn cancel it mid-write.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import logging
import math
import os
import resource
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import uvicorn

from levergate.config import Server
from levergate.errors import ConfigError
from levergate.gateway import Gateway
from levergate.server.asgi import App
from levergate.server.http_protocol import HttpProtocol, Limits, Overload

log = logging.getLogger("levergate.server")

# Descriptors kept out of the connection cap for the process itself (listening sockets, logs,
# the SQLite cache, Redis, DNS...).
_RESERVED_FDS = 64
# uvicorn's own cancel comes this long after the gateway has ended what was still running.
_CANCEL_MARGIN_SECONDS = 5


def connection_cap(*, configured: int, open_files: int) -> int:
    """The client connections a server accepts before answering 503: `server.max_connections`,
    lowered so that each client connection and one upstream connection for it still find a
    descriptor. Above the descriptor limit accept() fails and uvicorn drops the connection
    without a word, which is what the cap turns into a clear answer."""
    return max(1, min(configured, (open_files - _RESERVED_FDS) // 2))


def limits_for(settings: Server) -> Limits:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    open_files = soft if soft != resource.RLIM_INFINITY else 1 << 20
    cap = connection_cap(configured=settings.max_connections, open_files=open_files)
    if cap < settings.max_connections:
        log.warning(
            "server.max_connections %d lowered to %d: the open-files limit is %d",
            settings.max_connections, cap, open_files,
        )  # fmt: skip
    return Limits(
        header_bytes=settings.max_header_bytes,
        headers=settings.max_headers,
        head_timeout=settings.head_timeout_seconds,
        body_timeout=settings.body_timeout_seconds,
        body_min_rate=settings.body_min_bytes_per_second,
        keep_alive_timeout=settings.keep_alive_timeout_seconds,
        linger=settings.error_linger_seconds,
        max_connections=cap,
        overload=Overload(every=settings.overload_log_seconds),
    )


def server_for(gateway: Gateway) -> uvicorn.Server:
    """A uvicorn server for the gateway; the caller's event loop runs it (uvloop is installed by
    the CLI before the loop starts)."""
    settings = gateway.settings.server
    app = App(gateway)
    grace = settings.graceful_shutdown_seconds
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        loop="none",
        http=functools.partial(HttpProtocol, limits=limits_for(settings)),  # type: ignore[arg-type]
        ws="none",
        lifespan="on",
        access_log=settings.access_log,
        log_level=logging.WARNING,
        timeout_graceful_shutdown=math.ceil(grace) + _CANCEL_MARGIN_SECONDS,
        server_header=False,
        # X-Forwarded-* rewriting costs ~5% of a request's CPU; behind a trusted proxy that
        # needs it, run uvicorn yourself with the ASGI app (`levergate.server.asgi.App`).
        proxy_headers=False,
        date_header=False,
        backlog=4096,
    )
    return _Server(config, app=app, grace=grace)


class _Server(uvicorn.Server):
    """uvicorn's server, with the end of a graceful shutdown in the gateway's hands: once
    `server.graceful_shutdown_seconds` are over, what still runs is ended by the app (a stream
    with a `shutting_down` error event, an unanswered request with a 503), and one line says
    how many. uvicorn cancelled those tasks itself: streams stopped mid-body without a word and
    each logged a traceback."""

    def __init__(self, config: uvicorn.Config, *, app: App, grace: float) -> None:
        super().__init__(config)
        self._app = app
        self._grace = grace

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        ending = asyncio.get_running_loop().call_later(self._grace, self._end_requests)
        try:
            await super().shutdown(sockets)
        finally:
            ending.cancel()

    def _end_requests(self) -> None:
        streams, others = self._app.end_requests()
        if streams or others:
            log.warning(
                "shutdown: %d stream(s) and %d other request(s) still running after %s s "
                "(server.graceful_shutdown_seconds) ended with a shutting_down error",
                streams, others, self._grace,
            )  # fmt: skip


def raise_open_files_limit() -> None:
    """Raise the soft limit on open descriptors to the hard one, for `levergate serve` before it
    listens: a soft limit of 1,024 (a common default) is reached by 1,024 idle clients, after
    which accept() fails and new connections are dropped."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = max(soft, 1 << 20)
    if soft == resource.RLIM_INFINITY or soft >= hard:
        log.info("open-files limit %s: already the hard limit", soft)
        return
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError) as exc:
        log.warning("open-files limit kept at %d: cannot raise it to %d (%s)", soft, hard, exc)
    else:
        log.info("open-files limit raised from %d to %d", soft, hard)


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
    which passes `process_wide=True` to also raise the open-files limit before listening and
    tune the garbage collector once started."""
    if process_wide:
        raise_open_files_limit()
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
