"""Background jobs that outlive no gateway and survive their own crashes.

A job (active health checks, the shared semantic index following its Redis log) runs for the
gateway's lifetime, off the request path: `Gateway.start` hands each one to
`Supervisor.keep_running`, and `Gateway.aclose` cancels it. A job that raises is logged once
per crash with its traceback, counted in `/metrics` (`levergate_background_crashes{job}`), and
started again after a capped exponential backoff on the injected clock — a job that dies at
once on every start (Redis down) is retried at most once per `background.restart_cap_seconds`,
and one that ran for at least that long before it died starts over from the shortest wait. A
job that returns has finished and is not restarted; cancellation always passes through.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter

from levergate.core.clock import Clock

if TYPE_CHECKING:
    from levergate.config import BackgroundSettings

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class BackgroundJob:
    """A named coroutine function that runs until cancelled; the name labels its metrics."""

    name: str
    run: Callable[[], Awaitable[None]]


class Supervisor:
    @classmethod
    def of(
        cls, settings: BackgroundSettings, *, clock: Clock, registry: CollectorRegistry
    ) -> Supervisor:
        return cls(
            base_seconds=settings.restart_base_seconds,
            cap_seconds=settings.restart_cap_seconds,
            clock=clock,
            registry=registry,
        )

    def __init__(
        self,
        *,
        base_seconds: float,
        cap_seconds: float,
        clock: Clock,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self._base = base_seconds
        self._cap = cap_seconds
        self._clock = clock
        self.crashes = Counter(
            "levergate_background_crashes",
            "Background jobs that raised and were restarted, by job.",
            ("job",),
            registry=registry if registry is not None else CollectorRegistry(),
        )

    def delay(self, crashes: int) -> float:
        """Seconds before restart number `crashes` (1, 2, ...): base, 2 x base, ... up to cap."""
        return min(self._cap, self._base * 2.0 ** max(0, crashes - 1))

    async def keep_running(self, job: BackgroundJob) -> None:
        """Run `job` until it returns or this task is cancelled, restarting it after a crash."""
        crashes = 0
        while True:
            started = self._clock.now()
            try:
                await job.run()
            except Exception:
                _log.exception("background job %s crashed; restarting it", job.name)
                self.crashes.labels(job.name).inc()
            else:
                return
            crashes = 1 if self._clock.now() - started >= self._cap else crashes + 1
            await self._clock.sleep(self.delay(crashes))
