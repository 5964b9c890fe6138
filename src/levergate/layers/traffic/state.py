"""`TrafficState`: what the traffic levers share across one pipeline, built once.

The limit store (memory, or Redis with per-process failover) holds every tenant's, endpoint's
and key's limits; the retry budget is gateway-wide, so retries stay a bounded share of all
traffic; the ejection group caps how many endpoint keys may be ejected at once; the metrics
count what every traffic layer does. Each layer's `layer(...)` builder takes what it needs
from here (through `Shared.traffic`); nothing here builds a layer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry

from levergate.config import Traffic
from levergate.core.clock import Clock
from levergate.layers.traffic.endpoints import EjectionGroup
from levergate.layers.traffic.metrics import TrafficMetrics
from levergate.policies.budget import RetryBudget
from levergate.stores.limits import LimitStore, MemoryLimitStore


@dataclass(frozen=True, slots=True)
class TrafficState:
    store: LimitStore
    budget: RetryBudget
    group: EjectionGroup
    metrics: TrafficMetrics

    @classmethod
    def build(
        cls,
        settings: Traffic,
        *,
        clock: Clock,
        registry: CollectorRegistry,
        closers: list[Callable[[], Awaitable[None]]],
    ) -> TrafficState:
        metrics = TrafficMetrics(registry)
        retry = settings.retry
        return cls(
            store=_store(settings, clock=clock, metrics=metrics, closers=closers),
            budget=RetryBudget(
                ratio=retry.budget_ratio,
                min_per_second=retry.budget_min_per_second,
                ttl=retry.budget_ttl_seconds,
            ),
            group=EjectionGroup(max_share=settings.ejection.max_ejected_share, metrics=metrics),
            metrics=metrics,
        )


def _store(
    settings: Traffic,
    *,
    clock: Clock,
    metrics: TrafficMetrics,
    closers: list[Callable[[], Awaitable[None]]],
) -> LimitStore:
    if settings.store == "memory":
        return MemoryLimitStore(clock=clock)
    from levergate.stores.limits_redis import FailoverLimitStore, connect

    shared = connect(
        url=settings.redis_url, prefix=settings.redis_prefix, timeout=settings.redis_timeout_seconds
    )
    store = FailoverLimitStore(
        shared,
        clock=clock,
        local_share=settings.local_share,
        retry_seconds=settings.redis_retry_seconds,
        on_failover=metrics.store_failovers.inc,
    )
    closers.append(store.aclose)
    return store
