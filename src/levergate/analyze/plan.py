"""What a configuration does to each lever the replay evaluates, read from its settings once
(`Plan`), and which levers a candidate changes against the baseline.

Fingerprint-only levers (replayed from the log's features, bodies or not):

    exact        the exact cache and in-flight coalescing (`cache:` rules, namespaces, TTLs)
    affinity     prefix affinity over an alias's endpoints (`balance: affinity`)
    breakpoints  automatic Anthropic `cache_control` breakpoints (`prompt_cache.breakpoints`)
    defer        deferral to provider batch APIs (`defer:`, with `batch.enabled`)
    prompt_cache_key  OpenAI's `prompt_cache_key` set by the gateway
                 (`prompt_cache.openai_cache_key`: the aliases it applies to)

Levers that need the prompt's text, replayed through the gateway's own layers where the input
has bodies (analyze/bodies.py), else reported not evaluable with the reason:

    semantic     the semantic cache (`cache.semantic`, the rules' `semantic: true`)
    route        routing (`routing.routes`: rules and learned routers)
    trim         trimming (`trim.models`)
    cascade      cascades (`cascade`)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from levergate.catalog import Catalog
from levergate.config import CacheSettings, RoutingSettings, Settings, TrimSettings
from levergate.config.base import WILDCARD
from levergate.config.cascade import CascadeSettings
from levergate.config.deferral import DeferSettings
from levergate.config.prompt_cache import BreakpointsSettings
from levergate.layers.prompt_cache.layer import Provider, provider_of

__all__ = ["BODY_LEVERS", "FAST_LEVERS", "LEVERS", "Plan", "changed", "plan_of", "with_lever"]

FAST_LEVERS = ("exact", "affinity", "breakpoints", "defer", "prompt_cache_key")
BODY_LEVERS = ("semantic", "route", "trim", "cascade")
LEVERS = (*FAST_LEVERS, *BODY_LEVERS)
# The Plan fields each replayed lever owns (`with_lever` swaps them).
OWNS: dict[str, tuple[str, ...]] = {
    "exact": ("cache",),
    "affinity": ("balance", "balance_default", "affinity_ttl"),
    "breakpoints": ("breakpoints",),
    "defer": ("defer",),
    # The body levers' layers are built from `settings` (its models and catalog) and their own
    # part: a candidate's route may name an alias the baseline does not have.
    "semantic": ("semantic", "settings"),
    "route": ("routing", "settings", "catalog"),
    "trim": ("trim", "settings"),
    "cascade": ("cascade", "settings", "catalog"),
    "prompt_cache_key": ("cache_key",),
}


@dataclass(frozen=True)
class Plan:
    cache: CacheSettings | None  # None: the exact cache is off
    balance: Mapping[str, str]  # alias -> its balancing strategy, when it sets one
    balance_default: str  # traffic.balance.strategy
    affinity_ttl: float
    endpoints: Mapping[str, tuple[str, ...]]  # alias -> the upstreams that serve it
    anthropic: frozenset[str]  # aliases served by an Anthropic upstream
    breakpoints: BreakpointsSettings | None  # None: automatic breakpoints are off
    defer: DeferSettings | None  # None: deferral is off (or the Batch API is)
    catalog: Catalog
    # The rest of the settings, compared only (the levers needing bodies).
    compared: Mapping[str, Any]
    # The levers that need bodies (analyze/bodies.py builds their layers from these).
    settings: Settings | None = None
    semantic: CacheSettings | None = None  # None: no rule opts in (or the cache is off)
    routing: RoutingSettings | None = None
    trim: TrimSettings | None = None
    cascade: CascadeSettings | None = None

    # Aliases whose chat requests the gateway gives a `prompt_cache_key` (layers/prompt_cache).
    cache_key: frozenset[str] = frozenset()

    def endpoints_of(self, alias: str) -> tuple[str, ...]:
        return self.endpoints.get(alias) or self.endpoints.get(WILDCARD) or ("",)

    def keyed(self, alias: str) -> bool:
        """Whether the gateway gives `alias`'s chat requests a `prompt_cache_key`."""
        return (alias if alias in self.endpoints else WILDCARD) in self.cache_key

    def affinity(self, alias: str) -> bool:
        """Whether `alias` is balanced by prefix affinity."""
        name = alias if alias in self.endpoints else WILDCARD
        return self.balance.get(name, self.balance_default) == "affinity"


def plan_of(settings: Settings) -> Plan:
    kinds = {u.name: u.kind for u in settings.upstreams}
    upstreams = {u.name: u for u in settings.upstreams}
    endpoints = {m.name: tuple(e.upstream for e in m.endpoints) for m in settings.models}
    strategy = settings.traffic.balance.strategy
    pc = settings.prompt_cache
    defer = settings.defer if settings.defer.enabled and settings.batch.enabled else None
    return Plan(
        cache=settings.cache if settings.cache.enabled else None,
        balance={m.name: m.balance for m in settings.models if m.balance is not None},
        balance_default=strategy,
        affinity_ttl=settings.traffic.balance.affinity.ttl_seconds,
        endpoints=endpoints,
        anthropic=frozenset(
            name for name, ups in endpoints.items() if any(kinds.get(u) == "anthropic" for u in ups)
        ),
        breakpoints=pc.breakpoints if pc.enabled and pc.breakpoints.enabled else None,
        defer=defer,
        catalog=Catalog.build(settings),
        cache_key=frozenset(
            m.name
            for m in settings.models
            if pc.enabled
            and (
                pc.openai_cache_key == "on"
                or (pc.openai_cache_key == "auto" and provider_of(m, upstreams) is Provider.OPENAI)
            )
        ),
        compared={
            "semantic": (
                settings.cache.semantic.model_dump(),
                sorted(n for n, r in _rules(settings.cache) if r.semantic),
            ),
            "route": settings.routing.model_dump(),
            "trim": settings.trim.model_dump(),
            "cascade": settings.cascade.model_dump(),
        },
        settings=settings,
        semantic=(
            settings.cache
            if settings.cache.enabled and any(r.semantic for _, r in _rules(settings.cache))
            else None
        ),
        routing=settings.routing,
        trim=settings.trim,
        cascade=settings.cascade,
    )


def _rules(cache: CacheSettings) -> list[tuple[str, Any]]:
    return [("default", cache.default), *cache.models.items(), *cache.features.items()]


def _exact_part(plan: Plan) -> Any:
    c = plan.cache
    if c is None:
        return None
    rules = [(n, r.mode, r.ttl_seconds, r.cache_n) for n, r in _rules(c)]
    return rules, sorted(c.tenant_namespaces.items()), c.coalesce


def changed(baseline: Plan, candidate: Plan) -> list[str]:
    """The levers the candidate sets otherwise than the baseline, in `LEVERS` order."""
    parts: dict[str, Callable[[Plan], Any]] = {
        "exact": _exact_part,
        "affinity": lambda p: (sorted(p.balance.items()), p.balance_default, p.affinity_ttl),
        "breakpoints": lambda p: p.breakpoints,
        "prompt_cache_key": lambda p: sorted(p.cache_key),
        "defer": lambda p: (
            None
            if p.defer is None
            else (
                p.defer.min_deadline_seconds,
                sorted((k, v.batch_lines, v.async_requests) for k, v in p.defer.routes.items()),
            )
        ),
    }
    found = [lever for lever, part in parts.items() if part(baseline) != part(candidate)]
    found += [k for k in LEVERS if k in candidate.compared
              and candidate.compared[k] != baseline.compared[k]]  # fmt: skip
    return [lever for lever in LEVERS if lever in found]


def with_lever(baseline: Plan, candidate: Plan, lever: str) -> Plan:
    """The baseline with one replayed lever set as the candidate sets it."""
    return dataclasses.replace(baseline, **{f: getattr(candidate, f) for f in OWNS[lever]})
