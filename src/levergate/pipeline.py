"""`build_pipeline`: the ONE place where the order of the layers is written, with the reason for
each position. Reordering the levers is a one-line diff here and nowhere else; so is adding one.

    FRONT, per request:   Measure → Authenticate(+ key rates, budgets) → ResponsesBridge →
                          Admission → caches → Route → Cascade → Fallback → Dispatch
    PER MODEL:            Trim → PromptCacheOptimizer → MicroBatch(embeddings) → CountUsage →
                          Retry(budget) → Tiers(service tier by deadline) → Deadline →
                          Balance(endpoint keys, p2c / affinity / ..., renames the model)
    PER ENDPOINT KEY:     OutlierEjection → Limits → OpenAIUpstream (HTTP pool)
    BACKGROUND:           HealthChecks (optional active probes, same ejection state)
                          the shared semantic index following its Redis log
                          key budgets writing what is owed to the spend store

Each layer builds itself from its own settings section and `Shared` (the clock, the metrics
registry, the seeded random sources, the traffic, cache and key state, built once by
`Shared.build`) and returns None when its lever is off; `stack` skips a None. Later levers slot
in where DESIGN.md puts them (admission and caches in FRONT; prompt-cache optimizer, trim,
retry, deadline and balance per model; outlier ejection and limits per endpoint).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial

from levergate.config import WILDCARD, ModelSettings, Settings, TrafficSettings, UpstreamSettings
from levergate.core.clock import Clock, SystemClock
from levergate.core.embedder import Embedder
from levergate.core.jobs import BackgroundJob, Supervisor
from levergate.core.service import Layer, Service, stack
from levergate.layers.auth import Authenticate
from levergate.layers.cache.build import semantic_layer
from levergate.layers.cache.embeddings import EmbeddingsCache
from levergate.layers.cache.exact import ExactCache
from levergate.layers.cascade.layer import Cascade
from levergate.layers.dispatch import Dispatch
from levergate.layers.keys.quota import BudgetSink
from levergate.layers.measure.disclose import Disclose
from levergate.layers.measure.measure import Measure, Telemetry
from levergate.layers.measure.record import Sink
from levergate.layers.measure.recorder import Recorder
from levergate.layers.microbatch import MicroBatch
from levergate.layers.prompt_cache import PromptCacheOptimizer
from levergate.layers.prompt_cache.sink import PromptCacheSink
from levergate.layers.responses import ResponsesBridge
from levergate.layers.route import Route
from levergate.layers.shared import Shared
from levergate.layers.tiers import Tiers
from levergate.layers.traffic.admission import Admission
from levergate.layers.traffic.balance import Balance, Member
from levergate.layers.traffic.deadline import Deadline
from levergate.layers.traffic.endpoints import EndpointState, Node
from levergate.layers.traffic.fallback import Fallback
from levergate.layers.traffic.health_checks import HealthChecks
from levergate.layers.traffic.keys import EndpointKey, endpoint_keys
from levergate.layers.traffic.limits import Limits
from levergate.layers.traffic.outlier import OutlierEjection
from levergate.layers.traffic.retry import Retry
from levergate.layers.trim import Deferred, Trim
from levergate.layers.usage import CountUsage
from levergate.upstreams import Endpoint, make_endpoint
from levergate.upstreams.client import client_for
from levergate.upstreams.wire import HttpClient, WireCounts


@dataclass(frozen=True)
class Deps:
    """What the pipeline needs from the outside world; tests pass their own."""

    clock: Clock = field(default_factory=SystemClock)
    http_client: Callable[[UpstreamSettings], HttpClient] = client_for
    # The semantic cache's embedder; None builds the one `cache.semantic.embedder` names.
    embedder: Embedder | None = None
    # More sinks for each finished request's record (a request log, a ledger, a dashboard),
    # after Prometheus and key budgets; each gets every record once the answer has gone out.
    sinks: Sequence[Sink] = ()


@dataclass
class Pipeline:
    service: Service
    telemetry: Telemetry
    # Every finished request's record goes through it: Measure's, and the features' that
    # answer without the pipeline (a deferred batch line).
    recorder: Recorder
    upstreams: dict[str, Endpoint]
    models: dict[str, ModelSettings]
    shared: Shared
    supervisor: Supervisor
    # Every endpoint key's shared state, by upstream name: what readiness reads (the balancer
    # reads the same states through its members).
    endpoints: dict[str, list[EndpointState]] = field(default_factory=dict)
    # Every endpoint key's HTTP client, by upstream name, as /metrics reads their wire counts.
    wire: WireCounts | None = None
    # Jobs that run for the gateway's lifetime (health checks, index followers). `Gateway`
    # starts each one under `supervisor` when it opens, and cancels and awaits them when it
    # closes: no task outlives it.
    background: list[BackgroundJob] = field(default_factory=list)

    async def aclose(self) -> None:
        for upstream in self.upstreams.values():
            await upstream.aclose()
        await self.shared.aclose()


def build_pipeline(settings: Settings, deps: Deps | None = None) -> Pipeline:
    deps = deps or Deps()
    t, telemetry = settings.traffic, Telemetry(settings.metrics, ledger=settings.ledger)
    models = {m.name: m for m in settings.models}
    shared = Shared.build(settings, models=models, clock=deps.clock, registry=telemetry.registry,
                          ledger=telemetry.ledger)  # fmt: skip
    make = partial(make_endpoint, http_client=deps.http_client)
    upstreams = {u.name: make(u) for u in settings.upstreams}
    # Per upstream and API key: providers limit, throttle and fail each key on its own.
    keys = {u.name: endpoint_keys(u, upstreams[u.name], settings=t, shared=shared, make=make)
            for u in settings.upstreams}  # fmt: skip
    nodes = {name: [_per_endpoint(key, t, shared) for key in found] for name, found in keys.items()}
    # Wire events no request sees (bytes a server sent unasked), per upstream, on /metrics.
    wire = WireCounts((name, getattr(key.transport, "client", None))
                      for name, found in keys.items() for key in found)  # fmt: skip
    telemetry.registry.register(wire)
    # Trim's summaries go through Dispatch, which is built from the per-model stacks.
    summaries = Deferred()

    def per_model(model: ModelSettings) -> Service:
        layers = [
            # Above Retry: each attempt resends the trimmed request, fitted to this alias's window.
            Trim.layer(settings.trim, model=model, shared=shared, summarise_with=summaries),
            # Under Trim (marks the prompt as it will be sent), above Retry (every attempt sends
            # the same cache-friendly body).
            PromptCacheOptimizer.layer(settings.prompt_cache, model=model,
                                       upstreams=settings.upstreams, shared=shared),
            # Under the caches (a hit never waits), above Retry: a batch is one request, retried,
            # limited and balanced as one.
            MicroBatch.layer(settings.microbatch, model=model, shared=shared),
            # Under Trim (the prompt as sent), above Retry, under the caches (a replay keeps it).
            CountUsage.layer(settings.trim, model=model, upstreams=settings.upstreams,
                             shared=shared),
            # Above Balance: each attempt chooses afresh; only before the first streamed byte.
            Retry.layer(t.retry, shared=shared),
            Tiers.layer(settings.tiers, model=model, shared=shared),  # each attempt decided anew
            # Each attempt gets only what is left of the request's deadline.
            Deadline.layer(shared=shared),
        ]  # fmt: skip
        pool = _members(model, nodes)
        balance = Balance.of(pool, settings=t, shared=shared, strategy=model.balance)
        return stack(balance, layers)

    routes = {name: per_model(m) for name, m in models.items() if name != WILDCARD}
    wildcard = per_model(models[WILDCARD]) if WILDCARD in models else None
    dispatch = Dispatch(routes, fallback=wildcard)
    summaries.bind(dispatch)
    recorder = _recorder(settings, telemetry, shared, deps.sinks)
    service = stack(dispatch, [
        # Outermost: it must see every request, including the ones refused further down.
        _measure(settings, recorder),
        # Decides the tenant before anything keyed or limited by tenant; a key's own rates and
        # budgets apply here too, so a key over them is refused before any other work.
        Authenticate.layer(settings.auth, shared=shared),
        # A response belongs to its tenant, so under Authenticate; above everything else, so a
        # translated one meets every lever as the chat call it became.
        ResponsesBridge.layer(settings, models=models, shared=shared),
        # Tenant limits under Authenticate (which names the tenant), above the caches so a
        # tenant's quota means what it may ask, cached or not.
        Admission.layer(t, shared=shared),
        # Keyed by tenant, so under Authenticate; above routing, so a hit skips all of it.
        ExactCache.layer(settings.cache, shared=shared),
        # Embeddings are deterministic: each input cached alone, only the misses go upstream.
        EmbeddingsCache.layer(settings.cache, shared=shared),
        # Fuzzy and opt-in: after the exact cache, so an exact hit never pays for an embedding.
        semantic_layer(settings.cache, shared=shared, routes=dispatch, embedder=deps.embedder),
        # Under the caches (a hit skips the embedding), above Cascade (a route may choose one)
        # and Fallback: the chosen alias keeps its own fallbacks, retries and limits.
        Route.layer(settings.routing, models=models, shared=shared),
        # Under the caches (a hit skips every step), above Fallback: each step is an alias.
        Cascade.layer(settings.cascade, aliases=models, shared=shared),
        # Right above Dispatch: a fallback is another alias, with its own retries and limits.
        Fallback.layer(settings.models, on=t.fallback_on, shared=shared),
    ])  # fmt: skip
    # Off the request path: probes eject and readmit endpoints through the balancer's own state.
    checks = HealthChecks.job(t.health_checks, keys=[k for ks in keys.values() for k in ks],
                              shared=shared, http_client=deps.http_client)  # fmt: skip
    return Pipeline(
        service=service, telemetry=telemetry, recorder=recorder, upstreams=upstreams, models=models,
        endpoints={name: [key.state for key in found] for name, found in keys.items()},
        wire=wire,
        # Every job restarted after a crash, counted in the gateway's own registry.
        supervisor=Supervisor.of(settings.background, clock=deps.clock, registry=shared.registry),
        shared=shared, background=[job for job in (checks, *shared.jobs) if job],
    )  # fmt: skip


def _per_endpoint(key: EndpointKey, t: TrafficSettings, shared: Shared) -> Node:
    """PER ENDPOINT KEY: the layers between the balancer and one key's transport."""
    return Node(key.state, stack(key.transport, [
        # Outermost per endpoint: it sees every outcome there; the limits below only delay.
        OutlierEjection.layer(key, shared=shared),
        # Right above the wire: permits cover only upstream time and count every attempt.
        Limits.layer(t, key=key, shared=shared),
    ]))  # fmt: skip


def _members(model: ModelSettings, nodes: Mapping[str, Sequence[Node]]) -> list[Member]:
    """An alias's pool: every endpoint key of each of its targets, the target's weight shared
    among its keys."""
    return [
        Member(node, t.weight / len(nodes[t.upstream]), _renamed(model, t.upstream_model))
        for t in model.endpoints
        for node in nodes[t.upstream]
    ]


def _recorder(
    settings: Settings, telemetry: Telemetry, shared: Shared, extra: Sequence[Sink]
) -> Recorder:
    """The one recorder, with the sinks of the finished-request record beside Prometheus: key
    budgets are charged from it, so it is there whenever keys or other sinks are."""
    sinks: list[Sink] = [BudgetSink(shared.keys.budgets)] if shared.keys is not None else []
    # Expected against actual provider prompt-cache reads, by alias (metrics on only).
    cached = PromptCacheSink.of(settings, registry=telemetry.registry)
    sinks += [cached, *extra] if cached is not None else extra
    return Recorder(telemetry, catalog=shared.catalog, sinks=sinks,
                    shadow_labels=shared.shadow_labels)  # fmt: skip


def _measure(settings: Settings, recorder: Recorder) -> Layer | None:
    """Measure, recording whenever metrics are on or a sink beside Prometheus wants records
    (metrics on or off), or only writing the response headers that disclose the request."""
    headers = settings.server.response_headers
    otel = settings.otel
    tracing = otel.sample_ratio if otel.endpoint is not None else None  # its sink comes later
    # The request log observes the recorder once the gateway's features are built (later).
    wanted = tracing is not None or settings.request_log.enabled
    record = settings.metrics.enabled or bool(recorder.extra) or wanted
    if not record and Disclose.of(headers) is None:
        return None
    return partial(Measure, recorder=recorder, headers=headers, record=record, tracing=tracing)


def _renamed(model: ModelSettings, target_model: str | None) -> str | None:
    """The name an endpoint receives: the target's, else the alias's; `*` passes names as sent."""
    if model.name == WILDCARD:
        return None
    return target_model or model.upstream_model
