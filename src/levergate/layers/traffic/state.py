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

from levergate.config import TrafficSettings
from levergate.core.clock import Clock
from levergate.layers.traffic.endpoints import EjectionGroup, EndpointGauges
from levergate.layers.traffic.metrics import TrafficMetrics
from levergate.policies.budget import RetryBudget
from levergate.stores.limits import LimitStore, MemoryLimitStore
from levergate.stores.registry import StoreRegistry
from levergate.stores.select import Choice


@dataclass(frozen=True, slots=True)
class TrafficState:
    store: LimitStore
    budget: RetryBudget
    group: EjectionGroup
    metrics: TrafficMetrics

    @classmethod
    def build(
        cls,
        settings: TrafficSettings,
        *,
        clock: Clock,
        registry: CollectorRegistry,
        closers: list[Callable[[], Awaitable[None]]],
        choice: Choice,
        stores: StoreRegistry,
    ) -> TrafficState:
        """`choice`: where the limits live (`stores.select.limits`)."""
        metrics = TrafficMetrics(registry)
        retry = settings.retry
        store = _store(settings, choice=choice, stores=stores, clock=clock, metrics=metrics,
                       closers=closers)  # fmt: skip
        group = EjectionGroup(max_share=settings.ejection.max_ejected_share, metrics=metrics)
        registry.register(EndpointGauges(group, now=clock.now))
        return cls(
            store=store,
            budget=RetryBudget(
                ratio=retry.budget_ratio,
                min_per_second=retry.budget_min_per_second,
                ttl=retry.budget_ttl_seconds,
            ),
            group=group,
            metrics=metrics,
        )


def _store(
    settings: TrafficSettings,
    *,
    choice: Choice,
    stores: StoreRegistry,
    clock: Clock,
    metrics: TrafficMetrics,
    closers: list[Callable[[], Awaitable[None]]],
) -> LimitStore:
    if choice.backend not in ("redis", "sqlite"):
        return MemoryLimitStore(clock=clock)
    from levergate.stores.limits_redis import FailoverLimitStore, RedisLimitStore

    shared: LimitStore
    if choice.backend == "sqlite":
        from levergate.stores.limits_sqlite import SqliteLimitStore

        path = choice.address or settings.sqlite_path
        shared = SqliteLimitStore(path, busy_timeout=settings.sqlite_busy_seconds)
    else:
        client = stores.redis(choice, what="traffic.store")
        shared = RedisLimitStore(
            client, prefix=settings.redis_prefix, timeout=settings.redis_timeout_seconds
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
