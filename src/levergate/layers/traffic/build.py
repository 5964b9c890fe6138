"""`TrafficControl`: the state the traffic levers share, built once per pipeline from settings.

`pipeline.py` still writes the order of the layers; this module only builds what they share —
the limit store (memory, or Redis with per-process failover), the retry budget, every endpoint
key's state, the ejection group, the metrics, seeded random sources — and hands out each
layer with its dependencies bound, so the pipeline's lines stay one per layer. It also builds
the active health-check job, which probes every remote endpoint key it has handed state out for.

Limit keys are stable across replicas and restarts: an API key's limits live under a hash of
the key itself (two gateways listing the same key in a different order still share its
limit), an endpoint's under its name, a tenant's under the tenant.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Awaitable, Callable, Sequence
from functools import partial

from prometheus_client import CollectorRegistry
from pydantic import SecretStr

from levergate.config import RateLimits, Settings, Upstream
from levergate.core.clock import Clock
from levergate.core.service import Layer, Service
from levergate.errors import LevergateError, Overloaded
from levergate.layers.traffic.admission import Admission
from levergate.layers.traffic.balance import Balance, Member
from levergate.layers.traffic.deadline import Deadline
from levergate.layers.traffic.endpoints import EjectionGroup, EndpointState
from levergate.layers.traffic.fallback import Fallback
from levergate.layers.traffic.health_checks import HealthChecks
from levergate.layers.traffic.limits import Limits, LimitScope
from levergate.layers.traffic.metrics import TrafficMetrics
from levergate.layers.traffic.outlier import OutlierEjection
from levergate.layers.traffic.retry import Retry
from levergate.layers.traffic.waiting import Slots, WaitingRoom
from levergate.policies.aimd import Aimd
from levergate.policies.backoff import FullJitter
from levergate.policies.budget import RetryBudget
from levergate.policies.ejection import Ejection, EjectionPolicy
from levergate.policies.ewma import Ewma
from levergate.stores.limits import LimitStore, MemoryLimitStore
from levergate.upstreams import Endpoint
from levergate.upstreams.probe import HttpProbe
from levergate.upstreams.wire import HttpClient


class TrafficControl:
    def __init__(
        self, settings: Settings, *, clock: Clock, registry: CollectorRegistry | None = None
    ) -> None:
        self._all = settings
        self.settings = t = settings.traffic
        self.clock = clock
        self.metrics = TrafficMetrics(registry)
        self.closers: list[Callable[[], Awaitable[None]]] = []
        self.store = self._store()
        self.group = EjectionGroup(max_share=t.ejection.max_ejected_share, metrics=self.metrics)
        retry = t.retry
        self.budget = RetryBudget(
            ratio=retry.budget_ratio,
            min_per_second=retry.budget_min_per_second,
            ttl=retry.budget_ttl_seconds,
        )
        # Jitter and load spreading, not secrets: a seedable PRNG is the point.
        self._seeds = random.Random(t.seed)  # noqa: S311
        self._endpoint_slots: dict[str, Slots] = {}
        # Every remote endpoint key, for the active health checks.
        self._remote: list[tuple[EndpointState, Upstream, SecretStr | None]] = []

    def rng(self) -> random.Random:
        """A random source of its own per user; all derived from `traffic.seed` when set."""
        return random.Random(self._seeds.getrandbits(64))  # noqa: S311

    def _store(self) -> LimitStore:
        t = self.settings
        if t.store == "memory":
            return MemoryLimitStore(clock=self.clock)
        from levergate.stores.limits_redis import FailoverLimitStore, connect

        shared = connect(url=t.redis_url, prefix=t.redis_prefix, timeout=t.redis_timeout_seconds)
        store = FailoverLimitStore(
            shared,
            clock=self.clock,
            local_share=t.local_share,
            retry_seconds=t.redis_retry_seconds,
            on_failover=self.metrics.store_failovers.inc,
        )
        self.closers.append(store.aclose)
        return store

    # ---- per endpoint key ----------------------------------------------------------------

    def keyed(
        self, upstream: Upstream, first: Endpoint, *, make: Callable[[Upstream], Endpoint]
    ) -> list[tuple[str, SecretStr | None, Endpoint]]:
        """(name, key, transport) for each API key of `upstream`. One key: `first` serves it
        under the upstream's name; several: one transport per key, named `<upstream>/key<i>`."""
        keys = upstream.all_keys()
        if len(keys) == 1:
            return [(upstream.name, keys[0], first)]
        found: list[tuple[str, SecretStr | None, Endpoint]] = []
        for index, key in enumerate(keys):
            name = f"{upstream.name}/key{index}"
            endpoint = make(upstream.model_copy(update={"api_key": key, "name": name}))
            self.closers.append(endpoint.aclose)
            found.append((name, key, endpoint))
        return found

    def endpoint_state(
        self, upstream: Upstream | None, *, name: str, key: SecretStr | None
    ) -> tuple[EndpointState, list[LimitScope], Aimd | None]:
        """The state of one endpoint key, with the limit scopes and AIMD its Limits layer uses."""
        t = self.settings
        key_limits = upstream.key_limits if upstream else None
        endpoint_limits = upstream.limits if upstream else None
        scopes: list[LimitScope] = []
        slots: list[Slots] = []
        aimd = None
        if key_limits is not None:
            scopes.append(LimitScope.of(f"key:{_key_id(key, name)}", key_limits))
            aimd, slot = self._key_slots(key_limits)
            slots += [slot] if slot else []
        if endpoint_limits is not None and upstream is not None:
            scopes.append(LimitScope.of(f"endpoint:{upstream.name}", endpoint_limits))
            slot = self._shared_slots(upstream.name, endpoint_limits)
            slots += [slot] if slot else []
        room = WaitingRoom(
            store=self.store,
            clock=self.clock,
            slots=slots,
            max_queue=t.max_queue,
            shed_error=partial(self._capacity_shed, name),
        )
        e = t.ejection
        policy = EjectionPolicy(
            consecutive_failures=e.consecutive_failures if e.enabled else 1 << 62,
            base_seconds=e.base_seconds,
            max_seconds=e.max_seconds,
        )
        tau = t.balance.ewma_seconds
        state = EndpointState(
            name=name,
            room=room,
            health=Ejection(policy=policy),
            ttft=Ewma(tau=tau),
            latency=Ewma(tau=tau),
            speed=Ewma(tau=tau),
        )
        self.group.add(state)
        if upstream is not None:
            self._remote.append((state, upstream, key))
        return state, scopes, aimd

    def _key_slots(self, limits: RateLimits) -> tuple[Aimd | None, Slots | None]:
        cap = limits.max_concurrency
        if limits.adaptive_concurrency:
            a = self.settings.aimd
            maximum = min(a.maximum, cap) if cap else a.maximum
            aimd = Aimd(
                initial=min(a.initial, maximum),
                minimum=min(a.minimum, maximum),
                maximum=maximum,
                increase=a.increase,
                decrease=a.decrease,
            )
            return aimd, Slots(lambda: aimd.limit)
        return None, (Slots(lambda: cap) if cap else None)

    def _shared_slots(self, upstream: str, limits: RateLimits) -> Slots | None:
        cap = limits.max_concurrency
        if cap is None:
            return None
        if upstream not in self._endpoint_slots:
            self._endpoint_slots[upstream] = Slots(lambda: cap)
        return self._endpoint_slots[upstream]

    def _capacity_shed(self, name: str, why: str, retry_after: float) -> LevergateError:
        self.metrics.shed.labels("endpoint", "-", why).inc()
        return Overloaded(
            f"Upstream '{name}' is at capacity; retry after {retry_after:.1f}s.",
            code="capacity_exceeded",
            retry_after=retry_after,
        )

    def outlier_ejection(self, state: EndpointState) -> Layer:
        return partial(
            OutlierEjection, state=state, group=self.group, clock=self.clock, metrics=self.metrics
        )

    def limits(
        self, state: EndpointState, scopes: Sequence[LimitScope], aimd: Aimd | None
    ) -> Layer | None:
        """The endpoint's Limits layer, or None when it has no limit at all: then the layer
        would only estimate tokens and count, on every request, for nothing."""
        if not scopes and aimd is None:
            return None
        return partial(
            Limits,
            name=state.name,
            room=state.room,
            scopes=scopes,
            store=self.store,
            clock=self.clock,
            max_wait=self.settings.max_wait,
            metrics=self.metrics,
            aimd=aimd,
            slow_seconds=self.settings.aimd.slow_seconds,
        )

    # ---- per model and front -------------------------------------------------------------

    def balance(self, members: Sequence[Member]) -> Service:
        e = self.settings.ejection
        return Balance(
            members=members,
            strategy=self.settings.balance.strategy,
            group=self.group,
            clock=self.clock,
            rng=self.rng(),
            latency_factor=e.latency_factor if e.enabled else None,
            latency_min_requests=e.latency_min_requests,
        )

    def retry(self) -> Layer:
        r = self.settings.retry
        return partial(
            Retry,
            backoff=FullJitter(base=r.base_seconds, cap=r.cap_seconds),
            budget=self.budget,
            max_attempts=r.max_attempts,
            max_floor_seconds=r.max_floor_seconds,
            clock=self.clock,
            rng=self.rng(),
            metrics=self.metrics,
        )

    def deadline(self) -> Layer:
        return partial(Deadline, clock=self.clock)

    def admission(self) -> Layer | None:
        """Tenant limits, or None when no tenant has any."""
        t = self.settings
        if not t.tenants and t.tenant_default is None:
            return None
        return partial(
            Admission,
            tenants=t.tenants,
            default=t.tenant_default,
            store=self.store,
            clock=self.clock,
            max_wait=t.max_wait,
            max_queue=t.max_queue,
            metrics=self.metrics,
        )

    def fallback(self) -> Layer | None:
        """Fallbacks across aliases, or None when no alias has any."""
        models = self._all.models
        if not any(m.fallbacks or m.context_fallbacks for m in models):
            return None
        return partial(
            Fallback,
            chains={m.name: m.fallbacks for m in models},
            context_chains={m.name: m.context_fallbacks for m in models},
            on=self.settings.fallback_on,
            metrics=self.metrics,
        )

    def health_checks(
        self, *, http_client: Callable[[Upstream], HttpClient]
    ) -> Callable[[], Awaitable[None]] | None:
        """The active health-check job for `Pipeline.background`, or None when they are off."""
        h = self.settings.health_checks
        if not h.enabled or not self._remote:
            return None
        targets = []
        for state, upstream, key in self._remote:
            probe = HttpProbe.of(
                upstream, key, path=h.path, timeout=h.timeout_seconds, http_client=http_client
            )
            self.closers.append(probe.aclose)
            targets.append((state, probe))
        checks = HealthChecks(
            targets=targets,
            settings=h,
            group=self.group,
            clock=self.clock,
            rng=self.rng(),
            metrics=self.metrics,
        )
        return checks.run

    async def aclose(self) -> None:
        for close in self.closers:
            await close()


def _key_id(key: SecretStr | None, name: str) -> str:
    """A stable, non-secret id for an API key (a keyless endpoint is named by its endpoint)."""
    if key is None:
        return name
    return hashlib.sha256(key.get_secret_value().encode()).hexdigest()[:16]
