"""Router files reloaded without a restart: the learned routes' files watched on disk.

`levergate router promote` and `rollback` (routing/promote.py) replace a route's router file in
place (a rename, atomic); a running gateway notices within `routing.watch_seconds` and serves
the new router from the next request, with nothing else rebuilt (caches, limits and metrics
carry on). A change is the file's (inode, size, modification time) differing from what was last
read. The new file is loaded and checked off the event loop (a router file is parsed JSON, a few
hundred kilobytes) exactly as at start-up (layers/route.py `_learned`: the models it was trained
for, the embeddings, the threshold the route serves it at); a file that fails — corrupt, half
written by another tool, trained for other models or embeddings — is refused: the error is
logged, `levergate_router_reloads_total{result="refused"}` counts it, and the route keeps the
router it had. It is not read again until it changes again.

A background job of the pipeline (`router_watch`), restarted by the Supervisor if it ever fails.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from levergate.errors import ConfigError
from levergate.layers.route_paths import challenger_path

if TYPE_CHECKING:
    from levergate.config import RouteSpecSettings
    from levergate.core.clock import Clock
    from levergate.layers.route import Challenger, LearnedRouter, Resolved, RouteMetrics

log = logging.getLogger("levergate.route")

Stamp = tuple[int, int, int] | None  # (inode, size, mtime in ns); None: no file


def stamp(path: str) -> Stamp:
    try:
        found = Path(path).stat()
    except OSError:
        return None
    return found.st_ino, found.st_size, found.st_mtime_ns


class RouterWatch:
    def __init__(
        self,
        routes: dict[str, Resolved],
        *,
        load: Callable[[RouteSpecSettings], LearnedRouter],
        challenger: Callable[[RouteSpecSettings], Challenger | None] | None = None,
        clock: Clock,
        every: float,
        metrics: RouteMetrics,
    ) -> None:
        self._routes = routes  # the Route layer's own mapping: an entry swapped is served next
        self._load = load
        self._challenger = challenger
        self._clock = clock
        self._every = every
        self._metrics = metrics
        self._seen = {name: stamp(r.spec.learned.file) for name, r in routes.items()
                      if r.spec.learned is not None and r.learned is not None}  # fmt: skip
        self._challengers = {name: stamp(str(challenger_path(r.spec.learned.file)))
                             for name, r in routes.items()
                             if r.spec.learned is not None and r.learned is not None}  # fmt: skip

    async def run(self) -> None:
        """Check every `every` seconds, until cancelled (the job)."""
        while True:
            await self._clock.sleep(self._every)
            await self.check()

    async def check(self) -> None:
        """Load each changed router file; swap it in, or refuse it and keep the old one."""
        if self._challenger is not None:
            await self._check_challengers(self._challenger)
        for name, seen in list(self._seen.items()):
            route = self._routes[name]
            assert route.spec.learned is not None  # noqa: S101 - only learned routes are watched
            path = route.spec.learned.file
            now = stamp(path)
            if now == seen or now is None:
                continue
            self._seen[name] = now
            try:
                learned = await asyncio.to_thread(self._load, route.spec)
            except ConfigError as exc:
                self._metrics.reloads.labels(name, "refused").inc()
                log.error(  # noqa: TRY400 - the message says what is wrong; no traceback
                    "route %r: router file %s refused, the route keeps its router: %s",
                    name, path, exc.message,
                )  # fmt: skip
                continue
            self._routes[name] = dataclasses.replace(route, learned=learned)
            self._metrics.learned(name, learned)
            self._metrics.reloads.labels(name, "loaded").inc()
            log.info("route %r: router file %s loaded (threshold %.4f)", name, path,
                     learned.threshold)  # fmt: skip

    async def _check_challengers(
        self, load: Callable[[RouteSpecSettings], Challenger | None]
    ) -> None:
        """A challenger file put (`levergate router challenge`), replaced or removed: the route
        gets it, or drops its challenger; a file that fails is refused, as a router file is."""
        for name, seen in list(self._challengers.items()):
            route = self._routes[name]
            assert route.spec.learned is not None  # noqa: S101 - only learned routes are watched
            path = challenger_path(route.spec.learned.file)
            now = stamp(str(path))
            if now == seen:
                continue
            self._challengers[name] = now
            try:
                found = None if now is None else await asyncio.to_thread(load, route.spec)
            except ConfigError as exc:
                self._metrics.reloads.labels(name, "challenger_refused").inc()
                log.error(  # noqa: TRY400 - the message says what is wrong; no traceback
                    "route %r: challenger %s refused: %s", name, path, exc.message,
                )  # fmt: skip
                continue
            self._routes[name] = dataclasses.replace(self._routes[name], challenger=found)
            self._metrics.reloads.labels(name, "challenger").inc()
            log.info("route %r: challenger %s", name,
                     "removed" if found is None else f"{path} at share {found.share}")  # fmt: skip
