"""`levergate serve --workers N`: N worker processes on one port, under one supervising parent.

One process uses one core; this is how a machine with more uses them without a load balancer.

- **One port.** The parent binds the port (resolving port 0) on a socket with `SO_REUSEPORT`
  that it never listens on, so the port stays reserved while workers come and go; each worker
  binds and listens on its own `SO_REUSEPORT` socket, and the kernel spreads new connections
  over the listening ones (a hash of the connection's addresses). A dead worker's queue dies
  with it, which is why the parent replaces it at once.
- **One gateway.** Workers are spawned, not forked (a forked event loop, thread pool or Redis
  pool is a shared one), each with the same settings and `server.workers = N`, which moves
  state that would live in one process's memory to files every worker opens
  (stores/select.py): rate limits (stores/limits_sqlite.py), the exact and embeddings
  caches, key budgets and stored responses in SQLite, unless `stores` names Redis, which
  every worker then shares as replicas do. What stays per worker: the semantic index in
  memory (its entries are in the shared cache, but a worker finds only what it added, unless
  the index is Redis's), concurrency caps and the priority queues, retry budgets, ejection,
  health checks and balancer statistics — as it stays per replica (config/traffic.py).
- **One /metrics.** The parent points prometheus_client's multiprocess mode at a fresh folder
  (`PROMETHEUS_MULTIPROC_DIR`, set before the workers start, removed at exit); any worker's
  /metrics adds every worker's counters and histograms up (layers/measure/prometheus.py).
- **Shutdown.** SIGTERM or SIGINT to the parent is passed on once to every worker, which
  drains (/readyz 503 for `server.drain_seconds`) and finishes its requests as a single
  process does; a second signal is passed on too (ends the drain). The parent exits 0 once
  all have stopped, and kills what is still running `_STOP_MARGIN_SECONDS` after their own
  deadline. Workers run in their own process group, so a terminal's Ctrl-C reaches them only
  through the parent (once), and a worker whose parent is gone stops itself.
- **Restarts.** A worker that exits while the parent is not stopping is started again, after
  a pause that doubles while workers keep dying young (a crash loop costs a line a minute,
  not a core).
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import shutil
import signal
import socket
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import wait
from multiprocessing.process import BaseProcess
from types import FrameType
from typing import Any

from levergate.config import Settings
from levergate.errors import ConfigError
from levergate.layers.measure.prometheus import MULTIPROCESS_DIR

log = logging.getLogger("levergate.server")

# More workers than this per core only adds switching (and each one's memory).
MAX_WORKERS_PER_CORE = 4
# A worker must listen within this long of being started (it builds a whole gateway).
_START_SECONDS = 120.0
# A worker that lived shorter than this died young: the next restart waits twice as long.
_YOUNG_SECONDS = 10.0
_RESTART_MIN_SECONDS = 0.5
_RESTART_MAX_SECONDS = 60.0
# Beyond the workers' own drain and grace, before the parent kills what still runs.
_STOP_MARGIN_SECONDS = 10.0


def cores() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def check_workers(settings: Settings, *, available: int) -> None:
    """Refuse a worker count the machine or the configuration cannot use, saying why."""
    workers = settings.server.workers
    if workers > MAX_WORKERS_PER_CORE * available:
        raise ConfigError(
            f"server.workers {workers}: more than {MAX_WORKERS_PER_CORE} per core on this "
            f"machine's {available} core(s) only adds switching; use at most "
            f"{MAX_WORKERS_PER_CORE * available} (one per core is the usual choice)"
        )
    if workers > 1 and (
        not settings.upstreams or any(u.kind == "local" for u in settings.upstreams)
    ):
        raise ConfigError(
            f"server.workers {workers}: the embedded engine (a `local` upstream, or no "
            "upstream) would load its model once per worker; run it with one worker and "
            "give it the cores through its `threads` setting"
        )


def reserve_port(host: str, port: int) -> socket.socket:
    """A socket bound to (host, port) with SO_REUSEPORT, never listening: it holds the port (a
    free one for port 0) for the workers to join."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    holder = socket.socket(family, socket.SOCK_STREAM)
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        holder.bind((host, port))
    except OSError as exc:
        holder.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return holder


def worker_socket(host: str, port: int) -> socket.socket:
    """A worker's own listening socket on the shared port."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.setblocking(False)  # noqa: FBT003 (the socket API)
    return sock


@dataclass(slots=True)
class _Slot:
    index: int
    process: BaseProcess | None = None
    started: float = 0.0
    pause: float = _RESTART_MIN_SECONDS
    due: float = 0.0  # when to start it again (after a death)


class Supervisor:
    """The parent: starts the workers, restarts the ones that die, passes signals on."""

    def __init__(
        self,
        settings: Settings,
        *,
        announce: Callable[[str], None],
        load: Callable[[], Settings] | None = None,
    ) -> None:
        """`load` reads the configuration file again: SIGHUP to the parent (or
        `POST /admin/reload` to any worker) has every worker reload with it."""
        self._settings = settings
        self._announce = announce
        self._load = load
        self._context = multiprocessing.get_context("spawn")
        self._slots = [_Slot(i) for i in range(settings.server.workers)]
        self._signals = 0
        self._stop_by = 0.0
        self._ready: Any = None
        self.metrics_dir = ""

    def run(self) -> int:
        server = self._settings.server
        holder = reserve_port(server.host, server.port)
        port = holder.getsockname()[1]
        self._settings = self._settings.model_copy(
            update={"server": server.model_copy(update={"port": port})}
        )
        self.metrics_dir = tempfile.mkdtemp(prefix="levergate-metrics-")
        # Read by prometheus_client when the spawned workers import it (multiprocess mode).
        os.environ[MULTIPROCESS_DIR] = self.metrics_dir
        self._ready = self._context.Queue()
        previous = {s: signal.signal(s, self._on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        previous[signal.SIGHUP] = signal.signal(signal.SIGHUP, self._on_hangup)
        try:
            for slot in self._slots:
                self._start(slot)
            if self._await_ready():
                self._announce(f"http://{server.host}:{port}/v1")
                self._supervise()
            return 0
        finally:
            self._stop_all(kill=True)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            holder.close()
            shutil.rmtree(self.metrics_dir, ignore_errors=True)

    def _start(self, slot: _Slot) -> None:
        process = self._context.Process(
            target=worker_main,
            args=(self._settings, slot.index, self._ready, os.getpid()),
            kwargs={"load": self._load},
            name=f"levergate-worker-{slot.index}",
        )
        process.start()
        slot.process, slot.started = process, time.monotonic()

    def _await_ready(self) -> bool:
        """Wait until every worker listens; False when a signal or a dead worker came first."""
        waiting = {slot.index for slot in self._slots}
        deadline = time.monotonic() + _START_SECONDS
        while waiting:
            if self._signals:
                return False
            dead = [
                s for s in self._slots if s.process is not None and s.process.exitcode is not None
            ]
            if dead:
                raise ConfigError(
                    f"worker {dead[0].index} exited with code {dead[0].process.exitcode} "  # type: ignore[union-attr]
                    "before it listened (its error is above)"
                )
            if time.monotonic() > deadline:
                raise ConfigError(f"the workers did not listen within {_START_SECONDS:.0f} s")
            with contextlib.suppress(Exception):
                index, _pid = self._ready.get(timeout=0.2)
                waiting.discard(index)
        return True

    def _supervise(self) -> None:
        while True:
            running = [s.process for s in self._slots if s.process is not None]
            if self._signals and not running:
                return
            wait([p.sentinel for p in running], timeout=0.5)
            now = time.monotonic()
            for slot in self._slots:
                self._reap(slot, now=now)
            if self._signals:
                if now > self._stop_by:
                    self._stop_all(kill=True)
                continue
            for slot in self._slots:
                if slot.process is None and now >= slot.due:
                    self._start(slot)

    def _reap(self, slot: _Slot, *, now: float) -> None:
        process = slot.process
        if process is None or process.exitcode is None:
            return
        slot.process = None
        if process.pid is not None:
            _mark_dead(process.pid, self.metrics_dir)
        if self._signals:
            return
        young = now - slot.started < _YOUNG_SECONDS
        slot.pause = min(slot.pause * 2, _RESTART_MAX_SECONDS) if young else _RESTART_MIN_SECONDS
        slot.due = now + slot.pause
        log.warning(
            "worker %d (pid %s) exited with code %s; starting another in %.1f s",
            slot.index, process.pid, process.exitcode, slot.pause,
        )  # fmt: skip

    def _on_signal(self, _sig: int, _frame: FrameType | None) -> None:
        self._signals += 1
        if self._signals == 1:
            server = self._settings.server
            wait_for = server.drain_seconds + server.graceful_shutdown_seconds
            self._stop_by = time.monotonic() + wait_for + _STOP_MARGIN_SECONDS
            log.info("stopping %d worker(s)", len(self._slots))
        for slot in self._slots:
            if slot.process is not None and slot.process.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(slot.process.pid, signal.SIGTERM)

    def _on_hangup(self, _sig: int, _frame: FrameType | None) -> None:
        """A reload: each worker reads the file again and swaps its pipeline (server/reload.py);
        a worker started later reads the new file from the start. Without a file: ignored."""
        if self._load is None or self._signals:
            log.warning("SIGHUP ignored: %s", "stopping" if self._signals else "no file to read")
            return
        try:  # the parent validates first: a bad file reaches no worker
            self._settings = _with_server(self._load(), self._settings)
        except ConfigError as exc:
            log.error("reload refused (SIGHUP), the old configuration keeps serving: %s", exc)  # noqa: TRY400
            return
        for slot in self._slots:
            if slot.process is not None and slot.process.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(slot.process.pid, signal.SIGHUP)

    def _stop_all(self, *, kill: bool) -> None:
        for slot in self._slots:
            process = slot.process
            if process is None:
                continue
            if kill and process.exitcode is None:
                process.kill()
            process.join(5)
            slot.process = None


def _mark_dead(pid: int, path: str) -> None:
    """prometheus_client's clean-up of a dead worker's live gauges (its counters stay)."""
    from prometheus_client import multiprocess

    with contextlib.suppress(OSError):
        multiprocess.mark_process_dead(pid, path)  # type: ignore[no-untyped-call]


def worker_main(
    settings: Settings,
    index: int,
    ready: Any,
    parent: int,
    *,
    load: Callable[[], Settings] | None = None,
) -> None:
    """A worker process's entry point (spawned: it imports levergate afresh)."""
    import asyncio

    from levergate.cli.serve import install_uvloop
    from levergate.logs import configure as configure_logging

    os.setpgrp()
    redactor = configure_logging(settings)
    install_uvloop()
    try:
        asyncio.run(_serve_worker(settings, index=index, ready=ready, parent=parent, load=load))
    except KeyboardInterrupt:
        pass
    except ConfigError as exc:  # one line, as the CLI prints it, not a traceback
        log.error("worker %d: %s", index, exc.message)  # noqa: TRY400 (no traceback)
        raise SystemExit(2) from None
    del redactor


async def _serve_worker(
    settings: Settings,
    *,
    index: int,
    ready: Any,
    parent: int,
    load: Callable[[], Settings] | None,
) -> None:
    import asyncio

    from levergate.app import build_gateway
    from levergate.server.run import serving

    # The Batch API and every other extension, as one process; its /metrics adds up every
    # worker's (the Telemetry reads PROMETHEUS_MULTIPROC_DIR, as a reloaded one does).
    gateway = build_gateway(settings)
    sock = worker_socket(settings.server.host, settings.server.port)

    def fan_out() -> None:  # POST /admin/reload: every worker reloads, through the parent
        os.kill(parent, signal.SIGHUP)

    # A reload keeps the running server.* (the parent's port); the file is read with its flags.
    keep = None if load is None else lambda: _with_server(load(), settings)
    async with serving(gateway, process_wide=True, sock=sock, load=keep, fan_out=fan_out):
        ready.put((index, os.getpid()))
        while os.getppid() == parent:  # noqa: ASYNC110 (no event says a parent died)
            await asyncio.sleep(1.0)
        log.warning("worker %d: the supervising process is gone; stopping", index)
        signal.raise_signal(signal.SIGTERM)
        await asyncio.Event().wait()


def _with_server(loaded: Settings, running: Settings) -> Settings:
    return loaded.model_copy(update={"server": running.server})
