"""ExactCache: serve an answer already given to the very same request, and coalesce identical
requests in flight.

Sits in FRONT under Authenticate/Admission (the tenant is known and limits were applied, so a
hit is cheap but still accounted to the tenant) and above the semantic cache, routing and
fallback: a hit skips all of them. Handles chat and completion calls; everything else passes.

The key is the canonical fingerprint (`policies.fingerprint`) of the body, the resolved model and
the tenant's namespace. Whether a request may use the cache is the configured rule
(`policies.cache_policy`: off / deterministic / always) narrowed by its `Cache-Control`.

A hit is replayed in the shape the client asked for (`cache_replay`). A miss goes upstream
through the single flight (`coalesce`); a whole answer is written before it is returned, a
streamed one only when the stream completed cleanly — in the stream's close path, never for an
error, a cut stream or a content-filtered answer. Answers that came from the semantic cache or
from a fallback model are never written here: a fuzzy answer, or another model's, must not
become the exact answer to this request.

Response headers: `x-levergate-cache: hit|miss|bypass|coalesced` and, on a hit, the entry's age
(`x-levergate-cache-age` in seconds, `age` as HTTP has it).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING

from levergate.config import Cache, CacheRule
from levergate.core.call import CacheOutcome, CacheResult, Call
from levergate.core.clock import Clock, SystemClock, timeout
from levergate.core.reply import Completed, Event, EventSource, Reply
from levergate.core.service import Layer, Service
from levergate.errors import UpstreamTimeout
from levergate.layers.cache.coalesce import SingleFlight
from levergate.layers.cache.entries import (
    CACHE_HEADER,
    Entries,
    hit_headers,
    meta_usage,
    usage_meta,
)
from levergate.layers.cache.replay import as_stream, assemble, replay, verdict, whole
from levergate.layers.cache.stats import CacheStats
from levergate.policies.cache_policy import bypass_reason, controls, namespace, rule_for
from levergate.policies.fingerprint import fingerprint
from levergate.stores.entry import Form

if TYPE_CHECKING:
    from levergate.layers.shared import Shared

log = logging.getLogger("levergate.cache")

NAME = "exact"
SEMANTIC = "semantic"  # a hit of the semantic cache below: never stored as an exact answer
_KINDS = frozenset({"chat", "completion"})


class ExactCache:
    @classmethod
    def layer(cls, settings: Cache, *, shared: Shared) -> Layer | None:
        """None when the cache is off (`Shared.cache` is None)."""
        if (state := shared.cache) is None:
            return None
        return partial(
            cls, settings=settings, entries=state.entries(NAME), stats=state.stats,
            resolve=state.resolve, clock=shared.clock,
        )  # fmt: skip

    def __init__(
        self,
        inner: Service,
        *,
        settings: Cache,
        entries: Entries,
        stats: CacheStats,
        resolve: Callable[[str, str], str],
        clock: Clock | None = None,
    ) -> None:
        self._inner = inner
        self._settings = settings
        self._entries = entries
        self._stats = stats
        self._resolve = resolve
        self._clock = clock or SystemClock()
        self._flights = SingleFlight()

    async def __call__(self, call: Call) -> Reply:
        if call.kind not in _KINDS:
            return await self._inner(call)
        rule = rule_for(self._settings, model=call.model, feature=call.ctx.feature)
        if bypass_reason(rule, call.body) is not None:
            self._stats.lookup(NAME, "bypass")
            return _marked(await self._inner(call), "bypass")
        asked = controls(call.ctx.headers, max_ttl=self._settings.max_ttl_seconds)
        key = fingerprint(
            call.body,
            kind=call.kind,
            resolved_model=self._resolve(call.model, call.ctx.feature),
            namespace=namespace(self._settings, call.ctx.tenant),
        )
        if asked.lookup:
            entry = await self._entries.load(key)
            now = self._entries.wall()
            if entry is not None and (asked.max_age is None or entry.age(now) <= asked.max_age):
                self._stats.lookup(NAME, "hit")
                prompt, completion, *bucket = meta_usage(entry.meta)
                self._stats.saved(NAME, prompt, completion)
                call.ctx.trace.cache = CacheResult(
                    NAME, CacheOutcome.HIT, prompt, completion, *bucket
                )
                headers = hit_headers("hit", entry, now)
                return replay(entry, kind=call.kind, stream=call.stream, headers=headers)
        ttl = asked.ttl or rule.ttl_seconds
        store = asked.store

        async def fetch() -> Reply:
            return await self._fetch(call, key, rule, ttl=ttl, store=store)

        if not self._settings.coalesce:
            reply, leader = await fetch(), True
        else:
            reply, leader = await self._join(call, key, fetch)
        outcome = "miss" if leader else "coalesced"
        self._stats.lookup(NAME, outcome if asked.lookup else "refresh")
        if call.ctx.trace.cache is None:  # a semantic hit below has said it already
            kind = CacheOutcome.MISS if leader else CacheOutcome.COALESCED
            call.ctx.trace.cache = CacheResult(NAME, kind)
        return _marked(await _shaped(reply, call), outcome)

    async def _join(
        self, call: Call, key: str, fetch: Callable[[], Awaitable[Reply]]
    ) -> tuple[Reply, bool]:
        """Join the flight, waiting no longer than this request's own deadline: a follower
        never passes through the Deadline layer below, which bounds only the leader's call."""
        if call.ctx.deadline is None:
            return await self._flights.run(key, fetch)
        remaining = call.ctx.deadline - self._clock.now()
        try:
            async with timeout(self._clock, remaining):
                return await self._flights.run(key, fetch)
        except TimeoutError:
            raise UpstreamTimeout(
                "The request's deadline passed while it waited for an identical request.",
                code="deadline_exceeded",
            ) from None

    async def _fetch(
        self, call: Call, key: str, rule: CacheRule, *, ttl: float, store: bool
    ) -> Reply:
        reply = await self._inner(call)
        below = call.ctx.trace.cache
        if not store or (below is not None and below.cache == SEMANTIC):
            return reply
        if call.ctx.trace.fallback is not None or call.ctx.trace.cascade_fallback:
            # Another model answered (a fallback, or a cascade's rejected cheap answer because
            # its strong step failed): fine for this request, not the answer to cache for it.
            self._stats.not_stored.labels(NAME, "fallback").inc()
            return reply
        if isinstance(reply, Completed):
            if reply.status != 200:
                self._stats.not_stored.labels(NAME, "status").inc()
                return reply
            why = verdict(reply.data, allow_tools=rule.cache_tool_calls)
            if why is not None:
                self._stats.not_stored.labels(NAME, why).inc()
                return reply
            meta = usage_meta(reply.usage)
            await self._entries.save(key, Form.COMPLETED, (reply.raw,), ttl=ttl, meta=meta)
            return reply
        allow_tools = rule.cache_tool_calls
        return reply.through(
            lambda events: self._store_when_complete(events, call.kind, key, ttl, allow_tools)
        )

    async def _store_when_complete(
        self, events: EventSource, kind: str, key: str, ttl: float, allow_tools: bool
    ) -> EventSource:
        seen: list[Event] = []
        async for event in events:
            seen.append(event)
            yield event
        # Reached only when the upstream stream ended cleanly: an error or a cut stream raised
        # above, and a client that closed early stopped this generator at its `yield`.
        whole = assemble(kind, seen)
        why = verdict(whole, allow_tools=allow_tools)
        if why is not None:
            self._stats.not_stored.labels(NAME, why).inc()
            return
        parts = tuple(e.data for e in seen)
        meta = usage_meta(whole.get("usage"))
        await self._entries.save(key, Form.STREAM, parts, ttl=ttl, meta=meta)


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
