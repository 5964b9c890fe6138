"""`build_pipeline`: the ONE place where the order of the layers is written, with the reason for
each position. Reordering the levers is a one-line diff here and nowhere else.

    FRONT, per request:   Measure → Authenticate(+ key rates, budgets) → Admission → caches →
                          Fallback → Dispatch
    PER MODEL:            Retry(budget) → Deadline → Balance(endpoint keys, renames the model)
    PER ENDPOINT KEY:     OutlierEjection → Limits → OpenAIUpstream (HTTP pool)
    BACKGROUND:           HealthChecks (optional active probes, same ejection state)
                          the shared semantic index following its Redis log

Later levers slot in where DESIGN.md puts them (admission and caches in FRONT; prompt-cache
optimizer, trim, retry, deadline and balance per model; outlier ejection and limits per endpoint).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial

from pydantic import SecretStr

from levergate.config import WILDCARD, Model, Settings, Upstream
from levergate.core.clock import Clock, SystemClock
from levergate.core.embedder import Embedder
from levergate.core.service import Layer, Service, stack
from levergate.layers.auth import Authenticate
from levergate.layers.cache.build import CacheKit, build_cache
from levergate.layers.dispatch import Dispatch
from levergate.layers.keys.build import KeyKit, build_keys
from levergate.layers.measure.measure import Measure, Telemetry
from levergate.layers.traffic.balance import Member
from levergate.layers.traffic.build import TrafficControl
from levergate.layers.traffic.endpoints import Node
from levergate.upstreams import Endpoint, make_endpoint
from levergate.upstreams.client import client_for
from levergate.upstreams.wire import HttpClient


@dataclass(frozen=True)
class Deps:
    """What the pipeline needs from the outside world; tests pass their own."""

    clock: Clock = field(default_factory=SystemClock)
    http_client: Callable[[Upstream], HttpClient] = client_for
    # The semantic cache's embedder; None builds the one `cache.semantic.embedder` names.
    embedder: Embedder | None = None


@dataclass
class Pipeline:
    service: Service
    telemetry: Telemetry
    upstreams: dict[str, Endpoint]
    models: dict[str, Model]
    cache: CacheKit | None = None
    traffic: TrafficControl | None = None
    # Gateway keys (auth or the admin API on): the admin API works on the same keyring.
    keys: KeyKit | None = None
    # Jobs that run for the gateway's lifetime (health checks, flushers). `Gateway` starts each
    # one when it opens and cancels and awaits them when it closes: no task outlives it.
    background: list[Callable[[], Awaitable[None]]] = field(default_factory=list)

    async def aclose(self) -> None:
        for upstream in self.upstreams.values():
            await upstream.aclose()
        if self.traffic is not None:
            await self.traffic.aclose()
        if self.cache is not None:
            await self.cache.aclose()
        if self.keys is not None:
            await self.keys.aclose()


def build_pipeline(settings: Settings, deps: Deps | None = None) -> Pipeline:
    deps = deps or Deps()
    telemetry = Telemetry(settings.metrics)
    upstreams = {u.name: make_endpoint(u, http_client=deps.http_client) for u in settings.upstreams}

    traffic = TrafficControl(settings, clock=deps.clock, registry=telemetry.registry)
    make = partial(make_endpoint, http_client=deps.http_client)

    def per_endpoint(upstream: Upstream | None, name: str, key: SecretStr | None) -> Node:
        state, scopes, aimd = traffic.endpoint_state(upstream, name=name, key=key)
        # Outermost per endpoint: it sees every outcome there; the limits below only delay.
        layers: list[Layer] = [traffic.outlier_ejection(state)]
        if limits := traffic.limits(state, scopes, aimd):
            # Right above the wire: permits cover only upstream time and count every attempt.
            layers.append(limits)
        return Node(state, stack(keyed[name], layers))

    keyed: dict[str, Endpoint] = {}
    nodes: dict[str, list[Node]] = {}
    for u in settings.upstreams:
        if not isinstance(u, Upstream):
            keyed[u.name] = upstreams[u.name]
            nodes[u.name] = [per_endpoint(None, u.name, None)]
            continue
        per_key = traffic.keyed(u, upstreams[u.name], make=make)
        keyed.update({name: endpoint for name, _, endpoint in per_key})
        nodes[u.name] = [per_endpoint(u, name, key) for name, key, _ in per_key]

    def per_model(model: Model) -> Service:
        members = [
            Member(node, t.weight / len(nodes[t.upstream]), _renamed(model, t.upstream_model))
            for t in model.endpoints
            for node in nodes[t.upstream]
        ]
        layers: list[Layer] = []
        if settings.traffic.retry.enabled:
            # Above Balance: each attempt chooses afresh; only before the first streamed byte.
            layers.append(traffic.retry())
        # Each attempt gets only what is left of the request's deadline.
        layers.append(traffic.deadline())
        return stack(traffic.balance(members), layers)

    models = {m.name: m for m in settings.models}
    routes = {name: per_model(m) for name, m in models.items() if name != WILDCARD}
    fallback = per_model(models[WILDCARD]) if WILDCARD in models else None

    dispatch = Dispatch(routes, fallback=fallback)
    front: list[Layer] = []
    if settings.metrics.enabled:
        prices = {name: m.price for name, m in models.items()}
        # Outermost: it must see every request, including the ones refused further down.
        front.append(partial(Measure, telemetry=telemetry, prices=prices))
    keys = build_keys(
        settings,
        clock=deps.clock,
        limit_store=traffic.store,
        metrics=traffic.metrics,
        prices={name: m.price for name, m in models.items()},
    )
    # Decides the tenant before anything keyed or limited by tenant; a key's own rates and
    # budgets apply here too, so a key over them is refused before any other work.
    keyring, quota = (keys.keyring, keys.quota) if keys else (None, None)
    front.append(partial(Authenticate, settings=settings.auth, keyring=keyring, quota=quota))
    if admission := traffic.admission():
        # Tenant limits under Authenticate (which names the tenant), above the caches so a
        # tenant's quota means what it may ask, cached or not.
        front.append(admission)
    cache = None
    if settings.cache.enabled:
        cache = build_cache(
            settings.cache, models=models, clock=deps.clock, registry=telemetry.registry
        )
        # Keyed by tenant, so under Authenticate; above routing, so a hit skips all of it.
        front.append(cache.exact)
        # Embeddings are deterministic: each input cached alone, only the misses go upstream.
        front.append(cache.embeddings)
        if semantic := cache.semantic(routes=dispatch, embedder=deps.embedder):
            # Fuzzy and opt-in: after the exact cache, so an exact hit never pays for an embedding.
            front.append(semantic)

    if fallbacks := traffic.fallback():
        # Right above Dispatch: a fallback is another alias, with its own retries and limits.
        front.append(fallbacks)

    service = stack(dispatch, front)
    background = []
    if checks := traffic.health_checks(http_client=deps.http_client):
        # Off the request path: probes eject and readmit endpoints through the same ejection
        # state the balancer reads, with or without client traffic.
        background.append(checks)
    if cache is not None:
        # The shared semantic index replays and follows its Redis log off the request path.
        background.extend(cache.background)
    return Pipeline(
        service=service,
        telemetry=telemetry,
        upstreams=upstreams,
        models=models,
        cache=cache,
        traffic=traffic,
        keys=keys,
        background=background,
    )


def _renamed(model: Model, target_model: str | None) -> str | None:
    """The name an endpoint receives: the target's, else the alias's; `*` passes names as sent."""
    if model.name == WILDCARD:
        return None
    return target_model or model.upstream_model
