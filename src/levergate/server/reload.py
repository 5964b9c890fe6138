"""Configuration reload without a restart: `SIGHUP` or `POST /admin/reload`.

The file is read and validated again (the same `Settings` load `levergate serve` did at
start, flags included), a whole new gateway is built from it and started, and the app swaps to
it (`App.swap`, the one place a pipeline is replaced): requests that arrive from then on take
the new pipeline, while those already running (streams included) finish on the old one, which
is closed once the last of them ends (or after `server.graceful_shutdown_seconds`, whichever is
first). A file that does not validate, or a pipeline that cannot be built from it, is refused
with its error and the old configuration keeps serving. `server.*` (address, port, client
limits) is read at start only: a change there is logged and waits for a restart.

Reloads never overlap: one runs at a time, and signals that arrive while one runs are coalesced
into one more reload after it (a storm of 100 SIGHUPs is at most two reloads), so the file read
last is the one that serves. What replicas share lives in Redis and PostgreSQL and is untouched;
what a process keeps in memory (an in-memory cache or limit store, the balancer's statistics,
`/metrics` counters) starts over with the new pipeline, and a `kind: local` upstream is loaded
again (for a moment both models are in memory).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from levergate.config import Settings
from levergate.errors import ConfigError
from levergate.gateway import Gateway

if TYPE_CHECKING:
    from levergate.server.asgi import App

log = logging.getLogger("levergate.server")


def build(settings: Settings) -> Gateway:
    """The gateway a reload serves: the composition root's, with the features the new file
    turns on (levergate/app.py)."""
    from levergate.app import build_gateway

    return build_gateway(settings)


class Reloader:
    def __init__(
        self, app: App, load: Callable[[], Settings], *, fan_out: Callable[[], None] | None = None
    ) -> None:
        """`fan_out`: a worker of `serve --workers` asks its parent to have every worker reload
        (server/workers.py): `POST /admin/reload` then validates the file and calls it."""
        self._app = app
        self._load = load
        self._fan_out = fan_out
        self._lock = asyncio.Lock()
        self._again = False
        self._signalled: asyncio.Task[None] | None = None
        self._retiring: set[asyncio.Task[None]] = set()
        self.reloads = 0  # completed swaps

    async def reload(self) -> Settings:
        """Load, validate, build and swap; the new settings. A `ConfigError` (the old
        configuration still serving) when the file or the pipeline it describes is refused.
        A worker validates the file and has every worker reload, itself included (`fan_out`)."""
        if self._fan_out is not None:
            settings = self._load()
            self._fan_out()
            return settings
        return await self._reload()

    async def _reload(self) -> Settings:
        async with self._lock:
            return await self._swap()

    def signal(self) -> None:
        """SIGHUP: reload soon; while a reload runs, once more after it (storms coalesce)."""
        if self._signalled is not None and not self._signalled.done():
            self._again = True
            return
        self._signalled = asyncio.get_running_loop().create_task(self._from_signals())

    async def _from_signals(self) -> None:
        while True:
            self._again = False
            try:
                await self._reload()
            except ConfigError as exc:
                # The error says what is wrong with the file; a traceback would say nothing more.
                log.error(  # noqa: TRY400
                    "reload refused (SIGHUP), the old configuration keeps serving: %s", exc
                )
            if not self._again:
                return

    async def _swap(self) -> Settings:
        old = self._app.gateway
        settings = self._load()
        if not settings.upstreams:
            raise ConfigError("upstreams: a reload cannot switch to the embedded default")
        if settings.server != old.settings.server:
            log.warning("reload: server.* changed in the file; it takes effect at restart")
            settings = settings.model_copy(update={"server": old.settings.server})
        try:
            new = build(settings)
        except (ValueError, OSError) as exc:
            raise ConfigError(f"the new configuration cannot be built: {exc}") from None
        try:
            await new.start()
        except BaseException:
            await new.aclose()
            raise
        new.draining = old.draining
        self._app.swap(new)
        self.reloads += 1
        log.info("reload: configuration swapped; requests running on the old one finish on it")
        task = asyncio.get_running_loop().create_task(self._retire(old))
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)
        return settings

    async def _retire(self, old: Gateway) -> None:
        """Close the old pipeline once nothing runs on it (bounded by the grace period)."""
        grace = old.settings.server.graceful_shutdown_seconds
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(grace):
                    while True:
                        self._app.ended.clear()
                        if not self._app.running_on(old):
                            break
                        await self._app.ended.wait()
        finally:
            await old.aclose()

    async def aclose(self) -> None:
        """At shutdown: close what is still retiring (its requests were ended by the server)."""
        if self._signalled is not None:
            self._signalled.cancel()
        for task in list(self._retiring):
            task.cancel()
        await asyncio.gather(*self._retiring, return_exceptions=True)
