"""Running the app on a real socket (uvicorn's server and parser; each request reaches the app
through levergate's own cycle, server.http_cycle, not ASGI; the lifespan is ASGI's).

uvicorn with uvloop and httptools was measured against the alternatives on this machine
(benchmarks/results/server_choice.md) and chosen for the lowest CPU per proxied request among
servers that can also be embedded in a running event loop, which the tests and the library need.
The client limits (`config.ServerSettings`) are enforced in its protocol (server.http_protocol);
this module fits the connection cap to the descriptor limit and, at shutdown, ends what outlasts the
grace period with a `shutting_down` error instead of letting uvicorn cancel it mid-write.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import math
import os
import resource
import signal
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from types import FrameType

import uvicorn

from levergate.config import ServerSettings, Settings
from levergate.core.jobs import BackgroundJob
from levergate.errors import ConfigError
from levergate.gateway import Gateway
from levergate.server.asgi import App
from levergate.server.http_protocol import HttpProtocol, Limits, Overload
from levergate.server.memory import MIB, Trimmer, glibc
from levergate.server.peers import Peers

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


def limits_for(settings: ServerSettings) -> Limits:
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
        peers=Peers(per_peer=settings.max_connections_per_peer,
                    shed_after=settings.shed_idle_after_seconds),
        peer_overload=Overload(every=settings.overload_log_seconds,
                               what="connections per peer address over %d",
                               setting="server.max_connections_per_peer"),
    )  # fmt: skip


def server_for(
    gateway: Gateway,
    *,
    load: Callable[[], Settings] | None = None,
    fan_out: Callable[[], None] | None = None,
) -> uvicorn.Server:
    """A uvicorn server for the gateway; the caller's event loop runs it (uvloop is installed by
    the CLI before the loop starts). `load` reads the configuration again for a reload."""
    settings = gateway.settings.server
    app = App(gateway, load=load, fan_out=fan_out)
    grace = settings.graceful_shutdown_seconds
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        loop="none",
        http=functools.partial(HttpProtocol, limits=limits_for(settings), app=app),  # type: ignore[arg-type]
        ws="none",
        lifespan="on",
        # The app writes the access log (server/access_log.py), and uvicorn's own records go to
        # the process's handlers: no logging setup of uvicorn's (it replaced the handlers and
        # the format, and its access line was held at WARNING: nothing was printed).
        access_log=False,
        log_config=None,
        log_level=logging.WARNING,
        timeout_graceful_shutdown=math.ceil(grace) + _CANCEL_MARGIN_SECONDS,
        server_header=False,
        # X-Forwarded-* rewriting costs ~5% of a request's CPU; behind a trusted proxy that
        # needs it, run uvicorn yourself with the ASGI app (`levergate.server.asgi.App`).
        proxy_headers=False,
        date_header=False,
        backlog=4096,
    )
    return _Server(config, app=app, grace=grace, drain=settings.drain_seconds)


class _Server(uvicorn.Server):
    """uvicorn's server, with the end of a graceful shutdown in the gateway's hands: once
    `server.graceful_shutdown_seconds` are over, what still runs is ended by the app (a stream
    with a `shutting_down` error event, an unanswered request with a 503), and one line says
    how many. uvicorn cancelled those tasks itself: streams stopped mid-body without a word and
    each logged a traceback."""

    def __init__(self, config: uvicorn.Config, *, app: App, grace: float, drain: float) -> None:
        super().__init__(config)
        self._app = app
        self._grace = grace
        self._drain = drain
        self._forced: asyncio.Event | None = None  # set by a second signal while draining

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self._app.gateway.draining = True
        await self._drained()
        ending = asyncio.get_running_loop().call_later(self._grace, self._end_requests)
        try:
            await super().shutdown(sockets)
        finally:
            ending.cancel()

    async def _drained(self) -> None:
        """Keep serving, /readyz answering 503, for `server.drain_seconds` (a second signal
        ends the wait): the load balancer's checks see the replica leave before its listener
        closes."""
        if self._drain <= 0:
            return
        log.info(
            "draining: /readyz answers 503 for %s s (server.drain_seconds), then the listener "
            "closes", self._drain,
        )  # fmt: skip
        self._forced = asyncio.Event()
        if self.force_exit:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._forced.wait(), self._drain)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        if self.force_exit and self._forced is not None:
            # A signal handler: the event is set from the loop, not from inside it.
            asyncio.get_event_loop().call_soon_threadsafe(self._forced.set)

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


def tune_process(settings: ServerSettings) -> None:
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
async def serving(
    gateway: Gateway,
    *,
    process_wide: bool = False,
    sock: socket.socket | None = None,
    load: Callable[[], Settings] | None = None,
    fan_out: Callable[[], None] | None = None,
) -> AsyncIterator[str]:
    """Serve `gateway` on its configured host and port (0 picks a free one) inside the running
    loop, or on `sock` (a bound socket: a worker's, server/workers.py); yields the base URL
    (`http://host:port/v1`). Used by tests and `levergate serve`, which passes
    `process_wide=True` to also raise the open-files limit before listening, tune the garbage
    collector once started, and give freed memory back (server/memory.py), and `load` to
    reload the configuration on SIGHUP and `POST /admin/reload` (server/reload.py)."""
    if process_wide:
        raise_open_files_limit()
    server = server_for(gateway, load=load, fan_out=fan_out)
    _on_sighup(server)
    task = asyncio.create_task(server.serve(sockets=None if sock is None else [sock]))
    try:
        while not server.started:
            if task.done():
                await task  # surfaces the bind error
                raise OSError("the server stopped before it started")
            await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        trimmer = None
        if process_wide:
            tune_process(gateway.settings.server)
            trimmer = _trimming(gateway)
        try:
            yield f"http://{gateway.settings.server.host}:{port}/v1"
        finally:
            if trimmer is not None:
                trimmer.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await trimmer
    finally:
        server.should_exit = True
        await task


def _on_sighup(server: uvicorn.Server) -> None:
    """SIGHUP reloads the configuration when the app can (else the signal keeps its default)."""
    reloader = server._app.reloader if isinstance(server, _Server) else None
    if reloader is not None:
        asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, reloader.signal)


def _trimming(gateway: Gateway) -> asyncio.Task[None] | None:
    """The memory trimmer's task under the gateway's supervisor, or None (off, or no glibc)."""
    settings = gateway.settings.server
    found = glibc() if settings.memory_trim_above_mib else None
    if found is None:
        return None
    trim, free = found
    trimmer = Trimmer(every=settings.memory_trim_every_seconds,
                      above=settings.memory_trim_above_mib * MIB,
                      clock=gateway.clock, trim=trim, free=free)  # fmt: skip
    job = BackgroundJob("memory-trim", trimmer.run)
    return asyncio.create_task(gateway.pipeline.supervisor.keep_running(job))
