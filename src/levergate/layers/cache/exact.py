"""ExactCache: serve an answer already given to the very same request, and coalesce identical
requests in flight.

Sits in FRONT under Authenticate/Admission (the tenant is known and limits were applied, so a
hit is cheap but still accounted to the tenant) and above the semantic cache, routing and
fallback: a hit skips all of them. Handles chat and completion calls; everything else passes.

The key is the canonical fingerprint (`policies.fingerprint`) of the body, the resolved model and
the tenant's namespace; the body's canonical bytes are the call's (`Call.canonical_bytes`,
computed once: the request log's replay fingerprint digests the same bytes). Whether a
request may use the cache is the configured rule (`policies.cache_policy`: off /
deterministic / always) narrowed by its `Cache-Control`.

A hit is replayed in the shape the client asked for (`cache_replay`). A miss goes upstream
through the single flight (`coalesce`); a whole answer is written before it is returned, a
streamed one only when the stream completed cleanly — in the stream's close path, never for an
error, a cut stream or a content-filtered answer. Answers that came from the semantic cache or
from a fallback model are never written here: a fuzzy answer, or another model's, must not
become the exact answer to this request.

Response headers: `x-levergate-cache: hit|miss|bypass; reason=...|coalesced` and, on a hit, the
entry's age (`x-levergate-cache-age` in seconds, `age` as HTTP has it). A bypass names its reason
(`nondeterministic`, `n`, `off`: policies/cache_policy.py).

What a body decides here (its rule and its key) is remembered once it was served a hit, by the
JSON bytes it was parsed from (`Call.raw`, set only while the body is unchanged) with the kind,
the feature tag and the tenant, the rest of what decides them (`layers.cache.memo`): the same
request again skips the canonicalisation and the hash. A miss only looks (distinct requests
would churn the memo, and go upstream anyway).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING

from levergate.config import CacheRuleSettings, CacheSettings
from levergate.core.call import CacheOutcome, CacheResult, Call, Trace
from levergate.core.clock import Clock, SystemClock, timeout
from levergate.core.reply import Completed, Ended, Event, Reply, Watcher
from levergate.core.service import Layer, Service
from levergate.errors import UpstreamTimeout
from levergate.layers.cache.coalesce import SingleFlight
from levergate.layers.cache.entries import (
    CACHE_HEADER,
    CacheView,
    answered_by,
    hit_headers,
    served,
    usage_meta,
)
from levergate.layers.cache.memo import Memo
from levergate.layers.cache.replay import as_stream, assemble, replay, verdict, whole
from levergate.layers.measure.hot import Adds
from levergate.policies.cache_policy import (
    bypass_header,
    bypass_reason,
    clamped,
    namespace,
    rule_for,
)
from levergate.policies.fingerprint import key_of
from levergate.stores.entry import Form

if TYPE_CHECKING:
    from levergate.layers.shared import Shared

log = logging.getLogger("levergate.cache")

NAME = "exact"
SEMANTIC = "semantic"  # a hit of the semantic cache below: never stored as an exact answer
_KINDS = frozenset({"chat", "completion"})
# The bodies whose decision is remembered: at most this many, this many bytes of bodies in all,
# each at most `KEYED_BODY_BYTES` (hashing a larger one again costs about what it saves).
KEYED_BODIES = 1024
KEYED_BYTES = 1 << 20
KEYED_BODY_BYTES = 8 << 10
# A remembered body's feature tag and tenant, counted as their most (the edge allows 128
# characters each: control_headers.py, principal.py).
_NAMES_BYTES = 256
# What a body decides here: its rule, why it may not use the cache (None: it may) and its
# entry's key ("" when it may not). A plain tuple, built and unpacked on every request.
Decision = tuple[CacheRuleSettings, str | None, str]
# What a decision is remembered under: the raw body, the kind, the feature tag and the tenant.
_Unknown = tuple[bytes, str, str, str]
# Read once: a member read from its class costs ~900 instructions on CPython 3.11 (callgrind).
_MISS = CacheOutcome.MISS


class ExactCache:
    @classmethod
    def layer(cls, settings: CacheSettings, *, shared: Shared) -> Layer | None:
        """None when the cache is off (`Shared.cache` is None)."""
        if (state := shared.cache) is None:
            return None
        return partial(cls, view=state.view(NAME, settings, remember=True), clock=shared.clock)

    def __init__(
        self,
        inner: Service,
        *,
        view: CacheView,
        clock: Clock | None = None,
    ) -> None:
        self._inner = inner
        self._view = view
        self._clock = clock or SystemClock()
        self._flights: SingleFlight[Trace] = SingleFlight()
        self._max_ttl = view.settings.max_ttl_seconds
        self._decided: Memo[Decision] = Memo(
            max_items=KEYED_BODIES, max_bytes=KEYED_BYTES, max_item_bytes=KEYED_BODY_BYTES
        )
        # The hit counters (`CacheStats.hits`), from the first hit on.
        self._hit_counters: tuple[Adds, Adds, Adds] | None = None

    async def __call__(self, call: Call) -> Reply:
        if call.kind not in _KINDS:
            return await self._inner(call)
        (rule, why, key), unknown = self._decide(call)
        if why is not None:
            self._view.stats.lookup(NAME, "bypass")
            return _marked(await self._inner(call), bypass_header(why))
        asked = call.ctx.controls.cache
        if asked.ttl is not None and asked.ttl > self._max_ttl:  # else `clamped` is itself
            asked = clamped(asked, max_ttl=self._max_ttl)
        if asked.lookup:
            entry = await self._view.entries.load(key)
            now = self._view.entries.wall()
            if entry is not None and (asked.max_age is None or entry.age(now) <= asked.max_age):
                if unknown is not None:  # a body that repeats: decided once from now on
                    size = len(unknown[0]) + _NAMES_BYTES
                    self._decided.put(unknown, (rule, why, key), size=size)
                hit = call.ctx.trace.cache = served(NAME, entry.meta)
                # `stats.lookup(NAME, "hit")` and `stats.saved(...)`, through counters kept
                # here: two calls and two keyed look-ups fewer a hit.
                counted = self._hit_counters
                if counted is None:
                    counted = self._hit_counters = self._view.stats.hits(NAME)
                looked_up, saved_input, saved_output = counted
                looked_up.inc(1)
                if hit.saved_input:
                    saved_input.inc(hit.saved_input)
                if hit.saved_output:
                    saved_output.inc(hit.saved_output)
                headers = hit_headers("hit", entry, now)
                return replay(entry, kind=call.kind, stream=call.stream, headers=headers)
        ttl = asked.ttl or rule.ttl_seconds
        store = asked.store

        async def fetch() -> Reply:
            return await self._fetch(call, key, rule, ttl=ttl, store=store)

        trace = call.ctx.trace
        if not self._view.settings.coalesce:
            reply, leader = await fetch(), trace
        else:
            reply, leader = await self._join(call, key, fetch)
        outcome = "miss" if leader is trace else "coalesced"
        self._view.stats.lookup(NAME, outcome if asked.lookup else "refresh")
        if leader is not trace:  # priced at what answered the request it shared
            alias, model = answered_by(leader)
            trace.cache = CacheResult(NAME, CacheOutcome.COALESCED, alias=alias,
                                      upstream_model=model)  # fmt: skip
        elif trace.cache is None:  # a semantic hit below has said it already
            trace.cache = CacheResult(NAME, _MISS)
        return _marked(await _shaped(reply, call), outcome)

    def _decide(self, call: Call) -> tuple[Decision, _Unknown | None]:
        """The call's rule, bypass reason and key: from the memo when its raw body, kind,
        feature and tenant were decided before; else worked out, with the memo's key to keep
        the decision under once it proved worth keeping (a hit: a miss or a bypass goes
        upstream anyway, and distinct requests would only churn the memo), None without a raw
        body."""
        ctx = call.ctx
        feature = ctx.controls.feature
        tenant = ctx.principal.tenant
        raw = call.raw
        unknown: _Unknown | None = None
        if raw is not None:
            decided = self._decided.get(memo := (raw, call.kind, feature, tenant))
            if decided is not None:
                return decided, None
            unknown = memo
        settings = self._view.settings
        rule = rule_for(settings, model=call.model, feature=feature)
        why = bypass_reason(rule, call.body)
        key = ""
        if why is None:
            key = key_of(
                call.canonical_bytes(),
                kind=call.kind,
                resolved_model=self._view.resolve(call.model, feature),
                namespace=namespace(settings, tenant),
            )
        return (rule, why, key), unknown

    async def _join(
        self, call: Call, key: str, fetch: Callable[[], Awaitable[Reply]]
    ) -> tuple[Reply, Trace]:
        """Join the flight, waiting no longer than this request's own deadline: a follower
        never passes through the Deadline layer below, which bounds only the leader's call.
        Returns the reply and the trace of the call that led the flight."""
        trace = call.ctx.trace
        if call.ctx.controls.deadline is None:
            return await self._flights.run(key, fetch, origin=trace)
        remaining = call.ctx.controls.deadline - self._clock.now()
        try:
            async with timeout(self._clock, remaining):
                return await self._flights.run(key, fetch, origin=trace)
        except TimeoutError:
            raise UpstreamTimeout(
                "The request's deadline passed while it waited for an identical request.",
                code="deadline_exceeded",
            ) from None

    async def _fetch(
        self, call: Call, key: str, rule: CacheRuleSettings, *, ttl: float, store: bool
    ) -> Reply:
        reply = await self._inner(call)
        below = call.ctx.trace.cache
        if not store or (below is not None and below.cache == SEMANTIC):
            return reply
        if call.ctx.trace.fallback is not None or call.ctx.trace.cascade_fallback:
            # Another model answered (a fallback, or a cascade's rejected cheap answer because
            # its strong step failed): fine for this request, not the answer to cache for it.
            self._view.stats.not_stored.labels(NAME, "fallback").inc()
            return reply
        if isinstance(reply, Completed):
            if reply.status != 200:
                self._view.stats.not_stored.labels(NAME, "status").inc()
                return reply
            why = verdict(reply.data, allow_tools=rule.cache_tool_calls)
            if why is not None:
                self._view.stats.not_stored.labels(NAME, why).inc()
                return reply
            alias, model = answered_by(call.ctx.trace)
            meta = usage_meta(reply.usage, alias=alias, model=model)
            await self._view.entries.save(key, Form.COMPLETED, (reply.raw,), ttl=ttl, meta=meta)
            return reply
        allow_tools = rule.cache_tool_calls
        return reply.watch(_Storing(self, call, key, ttl, allow_tools))

    async def store_stream(
        self, seen: list[Event], call: Call, key: str, ttl: float, allow_tools: bool
    ) -> None:
        """A stream that ended cleanly, stored whole unless it cannot be replayed."""
        whole = assemble(call.kind, seen)
        why = verdict(whole, allow_tools=allow_tools)
        if why is not None:
            self._view.stats.not_stored.labels(NAME, why).inc()
            return
        parts = tuple(e.data for e in seen)
        alias, model = answered_by(call.ctx.trace)
        meta = usage_meta(whole.get("usage"), alias=alias, model=model)
        await self._view.entries.save(key, Form.STREAM, parts, ttl=ttl, meta=meta)


class _Storing(Watcher):
    """A stream's events kept; stored once it ended cleanly (an error, a cut stream or a client
    that closed early stores nothing)."""

    __slots__ = ("_allow_tools", "_cache", "_call", "_key", "_ttl")
    keeps = True

    def __init__(
        self, cache: ExactCache, call: Call, key: str, ttl: float, allow_tools: bool
    ) -> None:
        self._cache, self._call, self._key = cache, call, key
        self._ttl, self._allow_tools = ttl, allow_tools

    async def end(self, ended: Ended) -> None:
        if ended.error is None and ended.events is not None:
            await self._cache.store_stream(
                ended.events, self._call, self._key, self._ttl, self._allow_tools
            )


def _marked(reply: Reply, outcome: str) -> Reply:
    reply.headers.setdefault(CACHE_HEADER, outcome)
    return reply


async def _shaped(reply: Reply, call: Call) -> Reply:
    """A coalesced waiter may want the other shape than the flight's leader asked for."""
    if isinstance(reply, Completed):
        if not call.stream or reply.status != 200:
            return reply
        return as_stream(call.kind, reply.data, headers=reply.headers)
    if call.stream:
        return reply
    return await whole(reply, call.kind)
