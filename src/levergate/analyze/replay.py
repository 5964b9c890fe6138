"""The fast path: a configuration's fingerprint-only levers replayed over the requests, in
arrival order, in virtual time (the clock is each request's arrival; nothing sleeps), and every
answer priced by the catalog.

Per request, in the pipeline's order:

1. Exact cache and coalescing (layers/cache/exact.py's decisions, from the log's features):
   the rule for its model and feature (`policies.cache_policy.rule_for`, `bypass_reason`) says
   whether it may be cached; its key is its namespace (`cache_policy.namespace`) and its
   fingerprint. An entry is written when its answer completes (arrival + total) and lives the
   rule's TTL; a request arriving while an identical one is in flight shares it (coalescing).
   A hit costs nothing and takes the gateway's own time (`hit_seconds`, from the log's hits or
   its overhead); a coalesced request waits for the answer it shares.
2. Deferral: a Batch API line or an async request its alias's `defer.routes` policy defers, a
   request whose `x-levergate-deadline` is at least `defer.min_deadline_seconds` away, or
   that asked `x-levergate-defer`, is priced at its model's batch discount (when the
   catalog gives one) and leaves the latency percentiles (answered within the batch window).
3. The endpoint: with prefix affinity, the member holding the longest prefix of its digests
   (`policies.affinity.OwnerTable`, ties by rendezvous hashing on the first block); otherwise
   the endpoint the log says served it, or round robin when it does not say.
4. The provider's prompt cache, one per endpoint (scoped by alias), as the simulator emulates
   it (analyze/provider_cache.py, bounded as the simulator's): OpenAI-style providers cache
   every prefix of at least 1,024 tokens, read back in 128-token steps, routed by the first
   ~256 tokens and the `prompt_cache_key` (the client's, or the gateway's where the
   configuration sets it) when the provider model has more than one machine; Anthropic ones
   only behind the gateway's automatic breakpoints, replayed by its own placer, written at the
   catalog's 5-minute or 1-hour write price and read at its read price.
5. The levers that need bodies, decided beforehand by the gateway's own layers per request
   (analyze/bodies.py, as `Effect`s: analyze/effects.py): after the exact cache, a semantic
   hit is free and takes a hit's time; otherwise the request goes on as the route, cascade and
   trim layers would send it (another alias, fewer prompt or output tokens, a rejected first
   answer paid and waited for).
6. Latency: a request keeps its own logged times shifted by the fitted prefill cost of the
   change in the prompt tokens it did not read from a cache (a cache write is prefilled like
   an uncached prompt, as the simulator times it; analyze/fit.py); one with no logged times
   takes the model's.

Pure apart from the catalog's lookups: no I/O, no wall clock.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from levergate.analyze.effects import Effect, Effects, applied
from levergate.analyze.fit import Latency
from levergate.analyze.inputs import Req
from levergate.analyze.plan import Plan
from levergate.analyze.provider_cache import AnthropicCache, OpenAICache, Usage
from levergate.bench.stats import percentile
from levergate.config import CacheSettings
from levergate.layers.prompt_cache.breakpoints import Placer
from levergate.policies.affinity import OwnerTable, rendezvous
from levergate.policies.cache_policy import bypass_reason, namespace, rule_for
from levergate.policies.pricing import Rates, Tokens, cost
from levergate.simulator.settings import PromptCacheSettings

__all__ = ["PROVIDER", "Run", "Timing", "replay"]

PROVIDER = PromptCacheSettings()  # the provider model: the simulator's defaults (one machine)


@dataclass(frozen=True)
class Timing:
    latency: Mapping[str, Latency]  # per answering alias
    overall: Latency
    hit_seconds: float  # what an exact-cache hit takes (the gateway's own time)


@dataclass
class Run:
    """One configuration's replay: totals, and what the percentiles and routes need."""

    requests: int = 0
    cost_usd: float = 0.0
    exact_hits: int = 0
    coalesced: int = 0
    deferred: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    written_tokens: int = 0
    semantic_hits: int = 0
    rerouted: int = 0  # answered by another alias than the log's (a route, a cascade)
    trimmed_tokens: int = 0  # prompt tokens trimming left out, beyond the log's
    escalated: int = 0  # a cascade's first answer rejected
    refused: int = 0  # trimming refused it
    written_1h_tokens: int = 0
    ttft: list[float] = field(default_factory=list)
    total: list[float] = field(default_factory=list)
    by_route: dict[str, float] = field(default_factory=lambda: defaultdict(float))

    def summary(self) -> dict[str, Any]:
        def at(values: list[float], q: float) -> float | None:
            return percentile(values, q) * 1000.0 if values else None

        self.ttft.sort()
        self.total.sort()
        return {
            "requests": self.requests, "cost_usd": self.cost_usd, "exact_hits": self.exact_hits,
            "coalesced": self.coalesced, "deferred": self.deferred,
            "prompt_tokens": self.prompt_tokens, "cached_tokens": self.cached_tokens,
            "written_tokens": self.written_tokens, "semantic_hits": self.semantic_hits,
            "rerouted": self.rerouted, "trimmed_tokens": self.trimmed_tokens,
            "escalated": self.escalated, "refused": self.refused,
            "written_1h_tokens": self.written_1h_tokens,
            "ttft_p50_ms": at(self.ttft, 50.0), "ttft_p95_ms": at(self.ttft, 95.0),
            "total_p50_ms": at(self.total, 50.0), "total_p95_ms": at(self.total, 95.0),
            "total_mean_ms": math.fsum(self.total) * 1000.0 / len(self.total) if self.total
            else None,
            "by_route": dict(self.by_route),
        }  # fmt: skip


class _Exact:
    """The exact cache in virtual time: entries appear when their answer completes."""

    def __init__(self) -> None:
        self.entries: dict[tuple[str, str], float] = {}  # key -> expiry
        self.flight: dict[tuple[str, str], float] = {}  # key -> when its answer completes
        self._pending: list[tuple[float, int, tuple[str, str], float]] = []
        self._seq = itertools.count()

    def advance(self, now: float) -> None:
        pending = self._pending
        while pending and pending[0][0] <= now:
            done, _, key, ttl = heapq.heappop(pending)
            self.entries[key] = done + ttl
            if self.flight.get(key) == done:
                del self.flight[key]

    def fill(self, key: tuple[str, str], done: float, ttl: float) -> None:
        self.flight[key] = done
        heapq.heappush(self._pending, (done, next(self._seq), key, ttl))


class _Endpoints:
    def __init__(self, plan: Plan) -> None:
        self._plan = plan
        self._owners: dict[str, OwnerTable] = {}
        self._turn: dict[str, int] = defaultdict(int)

    def choose(self, req: Req, now: float) -> str:
        members = self._plan.endpoints_of(req.alias)
        if len(members) == 1:
            return members[0]
        if req.blocks and self._plan.affinity(req.alias):
            table = self._owners.setdefault(
                req.alias, OwnerTable(ttl=self._plan.affinity_ttl, capacity=200_000)
            )
            depths = table.depths(req.blocks, now=now)
            chosen = (max(members, key=lambda m: depths.get(m, 0)) if depths
                      else members[rendezvous(members, req.blocks[0])])  # fmt: skip
            table.claim(req.blocks, chosen, now=now)
            return chosen
        if req.upstream in members:
            return req.upstream
        turn = self._turn[req.alias]
        self._turn[req.alias] = turn + 1
        return members[turn % len(members)]


def _ttl(cache: CacheSettings, req: Req) -> float | None:
    """The TTL of `req`'s entry, or None when the cache would not look it up."""
    rule = rule_for(cache, model=req.model, feature=req.feature)
    if bypass_reason(rule, {"temperature": 0 if req.det else None, "n": req.n}) is not None:
        return None
    return rule.ttl_seconds


def _deferred(plan: Plan, req: Req, rates: Rates) -> bool:
    """Whether deferral sends `req` to its provider's batch API (config/deferral.py): a Batch
    API line to an alias whose route policy says `batch_lines`, an async request to one that
    says `async_requests`, or a request that asked or whose deadline is far enough away."""
    d = plan.defer
    if d is None or not rates.batch_discount:
        return False
    policy = d.routes.get(req.model)
    if req.origin in ("batch", "deferred"):
        return policy is not None and policy.batch_lines
    if req.origin == "async" and policy is not None and policy.async_requests:
        return True
    return req.defer or (req.not_after is not None and req.not_after >= d.min_deadline_seconds)


def replay(
    plan: Plan,
    requests: Sequence[Req],
    timing: Timing,
    effects: Effects | None = None,
    *,
    provider: PromptCacheSettings = PROVIDER,
) -> Run:
    """Replay `requests` (in arrival order) under `plan` (module docstring); `effects`: the
    body levers' decisions, by request index; `provider`: the model of the providers' prompt
    caches (the simulator's settings)."""
    replayer = _Replayer(plan, timing, provider)
    if not effects:
        for req in requests:
            replayer.one(req)
        return replayer.run
    for index, req in enumerate(requests):
        replayer.one(req, effects.get(index))
    return replayer.run


class _Replayer:
    """One configuration's state while its replay runs."""

    def __init__(self, plan: Plan, timing: Timing, provider: PromptCacheSettings) -> None:
        self.plan, self.timing, self.run, self.provider = plan, timing, Run(), provider
        self.exact, self.endpoints = _Exact(), _Endpoints(plan)
        self.openai: dict[str, OpenAICache] = {}  # per endpoint
        self.anthropic: dict[str, AnthropicCache] = {}
        self.placers: dict[str, Placer] = {}  # per alias, as the gateway has them
        self.rates: dict[str, Rates] = {}
        self.ttls: dict[tuple[str, str, bool, int], float | None] = {}  # a rule per shape

    def _cache_key(self, req: Req) -> tuple[tuple[str, str], float] | None:
        """The exact-cache key and TTL of `req`, or None when the cache would not look it up."""
        cache = self.plan.cache
        if cache is None or req.fp is None:
            return None
        shape = (req.model, req.feature, req.det, req.n)
        if shape in self.ttls:
            ttl = self.ttls[shape]
        else:
            ttl = self.ttls[shape] = _ttl(cache, req)
        return None if ttl is None else ((namespace(cache, req.tenant), req.fp), ttl)

    def one(self, req: Req, effect: Effect | None = None) -> None:
        now, run, exact = req.arrival, self.run, self.exact
        exact.advance(now)
        run.requests += 1
        keyed = self._cache_key(req)
        if keyed is not None:
            expiry = exact.entries.get(keyed[0])
            if expiry is not None and expiry > now:
                run.exact_hits += 1
                run.ttft.append(self.timing.hit_seconds)
                run.total.append(self.timing.hit_seconds)
                return
            done = exact.flight.get(keyed[0])
            if done is not None and self.plan.cache is not None and self.plan.cache.coalesce:
                run.coalesced += 1
                run.total.append(max(0.0, done - now))
                return
        delay = 0.0
        if effect is not None:
            if effect.semantic or effect.refused:
                self._answered(effect)
                return
            req, delay = self._through(req, effect)
        finish = self._upstream(req, delay)
        if keyed is not None:
            exact.fill(keyed[0], finish, keyed[1])

    def _answered(self, effect: Effect) -> None:
        """A request the semantic cache answers (a hit's time) or trimming refuses."""
        if effect.refused:
            self.run.refused += 1
            return
        self.run.semantic_hits += 1
        self.run.ttft.append(self.timing.hit_seconds + effect.seconds)
        self.run.total.append(self.timing.hit_seconds + effect.seconds)

    def _through(self, req: Req, effect: Effect) -> tuple[Req, float]:
        """`req` as the body levers send it, and the seconds a cascade's rejected first answer
        took before it (that answer priced here, with no prompt cache)."""
        run, timing = self.run, self.timing
        sent = applied(req, effect, timing.latency, timing.overall)
        run.rerouted += sent.alias != req.alias
        run.trimmed_tokens += max(0, req.prompt - sent.prompt)
        if effect.first is None:
            return sent, effect.seconds
        run.escalated += 1
        first = req._replace(alias=effect.first, prompt=sent.prompt, cached=0, written=0)
        rates = self.plan.catalog.rates(first.alias)
        usd = cost(Tokens(first.prompt, 0, 0, first.output), rates)
        run.cost_usd += usd
        run.by_route[req.model] += usd
        if first.alias == req.alias and req.total is not None:
            return sent, effect.seconds + req.total  # the log timed that very answer
        model = timing.latency.get(first.alias, timing.overall)
        return sent, effect.seconds + model.total(first.prompt, first.output)

    def _prompt_cache(self, req: Req) -> Usage:
        """Prompt tokens read and written at the provider's cache of the endpoint chosen."""
        if not (req.blocks and req.block_tokens):
            return Usage()
        endpoint = self.endpoints.choose(req, req.arrival)
        plan, now = self.plan, req.arrival
        if req.alias not in plan.anthropic:
            cache = self.openai.get(endpoint)
            if cache is None:
                cache = self.openai[endpoint] = OpenAICache(self.provider)
            key = req.pck
            if key is None and plan.keyed(req.model):
                key = f"lg\x00{req.tenant}"  # the gateway's: the tenant and the first 1 KB
            return Usage(cache.cached(req.alias, req, key=key, now=now))
        if plan.breakpoints is None:
            return Usage()
        found = self.anthropic.get(endpoint)
        if found is None:
            found = self.anthropic[endpoint] = AnthropicCache(
                self.provider, plan.breakpoints, self.placers
            )
        return found.usage(req.alias, req, now)

    def _upstream(self, req: Req, delay: float = 0.0) -> float:
        """Price and time one request sent upstream, `delay` seconds after it arrived (a
        cascade's rejected answer before it); when its answer completes."""
        run, now = self.run, req.arrival
        rates = self.rates.get(req.alias)
        if rates is None:
            rates = self.rates[req.alias] = self.plan.catalog.rates(req.alias)
        usage = self._prompt_cache(req)
        read, written = usage.read, usage.written
        uncached = req.prompt - read - written
        deferred = _deferred(self.plan, req, rates)
        usd = cost(Tokens(uncached, read, written, req.output, cache_write_1h=usage.written_1h),
                   rates.batched() if deferred else rates)  # fmt: skip
        run.cost_usd += usd
        run.by_route[req.model] += usd
        run.prompt_tokens += req.prompt
        run.cached_tokens += read
        run.written_tokens += written
        run.written_1h_tokens += usage.written_1h
        latency = self.timing.latency.get(req.alias, self.timing.overall)
        if req.total is not None:
            shift = latency.shift(req.cached - read)  # cache writes are prefilled too
            total = max(0.0, req.total + shift)
            ttft = None if req.ttft is None else max(0.0, req.ttft + shift)
        else:
            prefill = req.prompt - read
            total, ttft = latency.total(prefill, req.output), latency.ttft(prefill)
        total, ttft = total + delay, None if ttft is None else ttft + delay
        if deferred:
            run.deferred += 1
        else:
            run.total.append(total)
            if ttft is not None:
                run.ttft.append(ttft)
        return now + total if math.isfinite(total) else now
