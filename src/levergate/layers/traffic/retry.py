"""Retry: another attempt after a retryable failure, before the first streamed byte only.

PER MODEL, above Deadline and Balance, so each attempt is bounded by what is left of the
deadline and may land on another endpoint or key (the balancer has just seen this one fail).

Retryable: the provider's 408/409/429, 5xx, refused or cut connections, timeouts, and a stream
that fails before its first event (nothing has reached the client yet, so nothing is lost by
starting over — the first event is pulled here before the stream is handed up). Never
retried: the caller's own mistakes (other 4xx), the gateway's own refusals (limits already
waited as long as the deadline allowed), and anything after the first streamed byte.

Between attempts: full-jitter backoff, never shorter than the provider's hint (`Retry-After`,
`retry-after-ms`, `x-ratelimit-reset-*`; the balancer shortens it to zero when another key
or endpoint is free right now). Each retry spends from a gateway-wide `RetryBudget`, so during
an outage retries stay a bounded share of traffic instead of multiplying it.
"""

from __future__ import annotations

import random
from functools import partial
from typing import TYPE_CHECKING

from levergate.config import RetrySettings
from levergate.core.call import Call
from levergate.core.clock import Clock
from levergate.core.reply import Completed, Reply
from levergate.core.service import Layer, Service
from levergate.errors import UpstreamError, UpstreamRejected, UpstreamTimeout
from levergate.layers.traffic.metrics import TrafficMetrics
from levergate.policies.backoff import FullJitter
from levergate.policies.budget import RetryBudget

if TYPE_CHECKING:
    from levergate.layers.shared import Shared


class Retry:
    @classmethod
    def layer(cls, settings: RetrySettings, *, shared: Shared) -> Layer | None:
        """None when retries are off. The budget is the pipeline's: one for every alias."""
        if not settings.enabled:
            return None
        return partial(
            cls, backoff=FullJitter(base=settings.base_seconds, cap=settings.cap_seconds),
            budget=shared.traffic.budget, max_attempts=settings.max_attempts,
            max_floor_seconds=settings.max_floor_seconds, clock=shared.clock, rng=shared.rng(),
            metrics=shared.traffic.metrics,
        )  # fmt: skip

    def __init__(
        self,
        inner: Service,
        *,
        backoff: FullJitter,
        budget: RetryBudget,
        max_attempts: int,
        max_floor_seconds: float,
        clock: Clock,
        rng: random.Random,
        metrics: TrafficMetrics,
    ) -> None:
        self._inner = inner
        self._backoff = backoff
        self._budget = budget
        self._max_attempts = max_attempts
        self._max_floor = max_floor_seconds
        self._clock = clock
        self._rng = rng
        self._metrics = metrics

    async def __call__(self, call: Call) -> Reply:
        self._budget.deposit(now=self._clock.now())
        attempt = 0
        while True:
            try:
                reply = await self._inner(call)
                return reply if isinstance(reply, Completed) else await reply.prime()
            except UpstreamError as exc:
                reason = retry_reason(exc)
                if reason is None:
                    raise
                delay = self._delay(call, exc, attempt)
                if delay is None:
                    # Tell the client (x-should-retry: false) so its SDK does not multiply ours.
                    exc.retried = exc.retried or attempt > 0
                    raise
                self._metrics.retries.labels(reason).inc()
                call.ctx.trace.retries = attempt + 1
                await self._clock.sleep(delay)
                attempt += 1

    def _delay(self, call: Call, exc: UpstreamError, attempt: int) -> float | None:
        """Seconds to wait before the next attempt, or None when it must not happen."""
        floor = exc.retry_after or 0.0
        delay = self._backoff.delay(attempt, rng=self._rng, floor=floor)
        now = self._clock.now()
        why = None
        if attempt + 1 >= self._max_attempts:
            why = "attempts"
        elif floor > self._max_floor:
            why = "floor"
        elif call.ctx.controls.deadline is not None and now + delay >= call.ctx.controls.deadline:
            why = "deadline"
        elif not self._budget.withdraw(now=now):
            why = "budget"
        if why is not None:
            self._metrics.retries_denied.labels(why).inc()
            return None
        return delay


def retry_reason(exc: UpstreamError) -> str | None:
    """Why `exc` may be retried (a metric label), or None when it must not be."""
    if isinstance(exc, UpstreamRejected):
        return f"http_{exc.upstream_status}" if exc.retryable else None
    if isinstance(exc, UpstreamTimeout):
        return "timeout"
    return f"http_{exc.upstream_status}" if exc.upstream_status else "unavailable"
