"""`EndpointKey`: one (upstream, API key) pair, the unit the per-endpoint levers work on.

Providers limit, throttle and fail per API key, so an upstream with several keys becomes several
endpoint keys, each balanced, limited and ejected on its own: one key serves under the
upstream's name through the upstream's own transport; several get a transport each, named
`<upstream>/key<i>`. Each endpoint key carries the state its layers share (`EndpointState`:
health, waiting room, load), its limit scopes and its AIMD concurrency limit, so
`OutlierEjection.layer` and `Limits.layer` in `pipeline.py` need nothing else, and the health
checks probe every remote key.

Limit keys are stable across replicas and restarts: an API key's limits live under a hash of
the key itself (two gateways listing the same key in a different order still share its
limit), an endpoint's under its name.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from pydantic import SecretStr

from levergate.config import (
    AimdSettings,
    AnyUpstream,
    RateLimitsSettings,
    TrafficSettings,
    UpstreamSettings,
)
from levergate.errors import LevergateError, Overloaded
from levergate.layers.traffic.endpoints import EndpointState
from levergate.layers.traffic.limits import LimitScope
from levergate.layers.traffic.metrics import TrafficMetrics
from levergate.layers.traffic.waiting import Slots, WaitingRoom
from levergate.policies.aimd import Aimd
from levergate.policies.ejection import Ejection, EjectionPolicy
from levergate.policies.ewma import Ewma
from levergate.upstreams import Endpoint

if TYPE_CHECKING:
    from levergate.layers.shared import Shared


@dataclass(frozen=True, eq=False)
class EndpointKey:
    name: str
    upstream: UpstreamSettings | None  # None: an in-process endpoint (the embedded engine)
    key: SecretStr | None
    transport: Endpoint
    state: EndpointState
    scopes: tuple[LimitScope, ...]
    aimd: Aimd | None


def endpoint_keys(
    upstream: AnyUpstream,
    transport: Endpoint,
    *,
    settings: TrafficSettings,
    shared: Shared,
    make: Callable[[UpstreamSettings], Endpoint],
) -> list[EndpointKey]:
    """The endpoint keys of one upstream; `transport` serves it when it has a single key."""
    if not isinstance(upstream, UpstreamSettings):
        return [_key(None, upstream.name, None, transport=transport, endpoint_slots=None,
                     settings=settings, shared=shared)]  # fmt: skip
    endpoint_slots = _capped(upstream.limits)  # all keys of the endpoint together
    keys = upstream.all_keys()
    if len(keys) == 1:
        return [_key(upstream, upstream.name, keys[0], transport=transport,
                     endpoint_slots=endpoint_slots, settings=settings, shared=shared)]  # fmt: skip
    found = []
    for index, key in enumerate(keys):
        name = f"{upstream.name}/key{index}"
        own = make(upstream.model_copy(update={"api_key": key, "name": name}))
        shared.closers.append(own.aclose)
        found.append(_key(upstream, name, key, transport=own, endpoint_slots=endpoint_slots,
                          settings=settings, shared=shared))  # fmt: skip
    return found


def _key(
    upstream: UpstreamSettings | None,
    name: str,
    key: SecretStr | None,
    *,
    transport: Endpoint,
    endpoint_slots: Slots | None,
    settings: TrafficSettings,
    shared: Shared,
) -> EndpointKey:
    scopes: list[LimitScope] = []
    slots: list[Slots] = []
    aimd = None
    key_limits = upstream.key_limits if upstream else None
    if key_limits is not None:
        scopes.append(LimitScope.of(f"key:{_key_id(key, name)}", key_limits))
        aimd, slot = _key_slots(key_limits, settings.aimd)
        slots += [slot] if slot else []
    if upstream is not None and upstream.limits is not None:
        scopes.append(LimitScope.of(f"endpoint:{upstream.name}", upstream.limits))
        slots += [endpoint_slots] if endpoint_slots else []
    metrics = shared.traffic.metrics
    room = WaitingRoom(
        store=shared.traffic.store,
        clock=shared.clock,
        slots=slots,
        max_queue=settings.max_queue,
        shed_error=partial(_capacity_shed, name, metrics),
    )
    e = settings.ejection
    policy = EjectionPolicy(
        consecutive_failures=e.consecutive_failures if e.enabled else 1 << 62,
        base_seconds=e.base_seconds,
        max_seconds=e.max_seconds,
    )
    tau = settings.balance.ewma_seconds
    state = EndpointState(
        name=name,
        room=room,
        health=Ejection(policy=policy),
        ttft=Ewma(tau=tau),
        latency=Ewma(tau=tau),
        speed=Ewma(tau=tau),
    )
    shared.traffic.group.add(state)
    return EndpointKey(name, upstream, key, transport, state, tuple(scopes), aimd)


def _key_slots(limits: RateLimitsSettings, a: AimdSettings) -> tuple[Aimd | None, Slots | None]:
    cap = limits.max_concurrency
    reserve = limits.interactive_reserve
    if limits.adaptive_concurrency:
        maximum = min(a.maximum, cap) if cap else a.maximum
        aimd = Aimd(
            initial=min(a.initial, maximum),
            minimum=min(a.minimum, maximum),
            maximum=maximum,
            increase=a.increase,
            decrease=a.decrease,
        )
        return aimd, Slots(lambda: aimd.limit, reserve=reserve)
    return None, (Slots(lambda: cap, reserve=reserve) if cap else None)


def _capped(limits: RateLimitsSettings | None) -> Slots | None:
    if limits is None or not limits.max_concurrency:
        return None
    cap = limits.max_concurrency
    return Slots(lambda: cap, reserve=limits.interactive_reserve)


def _capacity_shed(
    name: str, metrics: TrafficMetrics, why: str, retry_after: float
) -> LevergateError:
    metrics.shed.labels("endpoint", "-", why).inc()
    return Overloaded(
        f"Upstream '{name}' is at capacity; retry after {retry_after:.1f}s.",
        code="capacity_exceeded",
        retry_after=retry_after,
    )


def _key_id(key: SecretStr | None, name: str) -> str:
    """A stable, non-secret id for an API key (a keyless endpoint is named by its endpoint)."""
    if key is None:
        return name
    return hashlib.sha256(key.get_secret_value().encode()).hexdigest()[:16]
