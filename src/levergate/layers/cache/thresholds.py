"""The semantic cache's thresholds per route, installed by `levergate cache threshold` and read
by running gateways without a restart.

The file (`cache.semantic.thresholds_file`, JSON) maps the model or route name a client asks
for to the threshold its lookups use, with the one it replaced (for `levergate cache rollback`)
and what the gate measured when it was installed:

    {"format": "levergate-cache-thresholds", "version": 1,
     "routes": {"faq": {"threshold": 0.91, "previous": 0.95, "target_false_hit": 0.02,
                        "installed_at": 1764770000.0, "measured": {...}}}}

A name not in the file uses `cache.semantic.threshold`. Writing is atomic (written beside,
renamed over), so a gateway never reads half a file. `ThresholdWatch`, a background job of the
pipeline, checks the file's (inode, size, mtime) every `cache.semantic.watch_seconds`; a changed
file is loaded off the event loop and its thresholds are used from the next lookup. A file that
does not load (corrupt, another format, a threshold out of range) is refused: the error is
logged, `levergate_cache_threshold_reloads_total{result="refused"}` counts it, and the cache
keeps the thresholds it had, until the file changes again.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from prometheus_client import CollectorRegistry, Counter
from pydantic import BaseModel, ConfigDict, Field

from levergate.core.clock import Clock
from levergate.core.json_file import read_json_file, validated
from levergate.errors import ConfigError
from levergate.layers.route_watch import Stamp, stamp

__all__ = ["RouteThreshold", "ThresholdWatch", "Thresholds", "ThresholdsFile", "install", "load",
           "rollback"]  # fmt: skip

log = logging.getLogger("levergate.cache")

FORMAT = "levergate-cache-thresholds"
MAX_FILE_BYTES = 4 * 1024 * 1024
MAX_ROUTES = 10_000


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RouteThreshold(_Frozen):
    threshold: float = Field(gt=0, le=1)
    previous: float | None = Field(None, gt=0, le=1)  # what it replaced (None: the config's)
    target_false_hit: float | None = Field(None, ge=0, le=1)
    installed_at: float | None = None
    measured: dict[str, Any] = Field(default_factory=dict)


class ThresholdsFile(_Frozen):
    format: Literal["levergate-cache-thresholds"] = "levergate-cache-thresholds"
    version: Literal[1] = 1
    routes: dict[str, RouteThreshold] = Field(default_factory=dict, max_length=MAX_ROUTES)

    def thresholds(self) -> dict[str, float]:
        return {name: r.threshold for name, r in self.routes.items()}


def load(path: str | Path) -> ThresholdsFile:
    """The file (an empty one when there is none); a `ConfigError` naming it and what is
    wrong."""
    path = Path(path)
    data = read_json_file(path, what="thresholds file", max_bytes=MAX_FILE_BYTES, missing_ok=True)
    if data is None:
        return ThresholdsFile()
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ConfigError(f"thresholds file {path} has no format {FORMAT!r}")
    return validated(ThresholdsFile, data, what="thresholds file", path=path)


def _write(path: Path, found: ThresholdsFile) -> None:
    beside = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    beside.write_text(found.model_dump_json(indent=2), encoding="utf-8")
    beside.replace(path)


def install(path: str | Path, route: str, entry: RouteThreshold) -> None:
    """`route`'s threshold becomes `entry`'s, atomically, the others kept."""
    path = Path(path)
    found = load(path)
    _write(path, found.model_copy(update={"routes": {**found.routes, route: entry}}))


def rollback(path: str | Path, route: str, *, default: float) -> RouteThreshold:
    """Swap `route`'s threshold and the one it replaced (`default`, the config's, when it
    replaced none): a second rollback undoes the first. Returns the entry now served."""
    path = Path(path)
    found = load(path)
    current = found.routes.get(route)
    if current is None:
        raise ConfigError(f"thresholds file {path} holds no threshold for {route!r} to roll back")
    back = current.previous if current.previous is not None else default
    entry = current.model_copy(update={"threshold": back, "previous": current.threshold})
    _write(path, found.model_copy(update={"routes": {**found.routes, route: entry}}))
    return entry


class Thresholds:
    """The thresholds lookups read now: per name from the file, else the configured one."""

    def __init__(self, default: float, routes: Mapping[str, float] | None = None) -> None:
        self.default = default
        self._routes = dict(routes or {})

    def of(self, name: str) -> float:
        return self._routes.get(name, self.default)

    def replace(self, routes: Mapping[str, float]) -> None:
        self._routes = dict(routes)


class ThresholdWatch:
    def __init__(
        self,
        path: str,
        thresholds: Thresholds,
        *,
        clock: Clock,
        every: float,
        registry: CollectorRegistry,
    ) -> None:
        self._path = path
        self._thresholds = thresholds
        self._clock = clock
        self._every = every
        self._seen: Stamp = None
        self.reloads = Counter(
            "levergate_cache_threshold_reloads",
            "The semantic cache's thresholds file read again after it changed, by result "
            "(loaded; refused: it did not load, and the cache kept its thresholds).",
            ("result",), registry=registry,
        )  # fmt: skip

    def first(self) -> None:
        """Read the file at start-up (a file that does not load stops the start)."""
        self._seen = stamp(self._path)
        self._thresholds.replace(load(self._path).thresholds())

    async def run(self) -> None:
        while True:
            await self._clock.sleep(self._every)
            await self.check()

    async def check(self) -> None:
        now = stamp(self._path)
        if now == self._seen:
            return
        self._seen = now
        try:
            found = await asyncio.to_thread(load, self._path)
        except ConfigError as exc:
            self.reloads.labels("refused").inc()
            log.error(  # noqa: TRY400 - the message says what is wrong; no traceback
                "semantic cache: thresholds file %s refused, the cache keeps its thresholds: %s",
                self._path, exc.message,
            )  # fmt: skip
            return
        self._thresholds.replace(found.thresholds())
        self.reloads.labels("loaded").inc()
        log.info("semantic cache: thresholds file %s loaded (%d routes)", self._path,
                 len(found.routes))  # fmt: skip
