"""SemanticCache: serve the answer to a differently worded but same question. Opt-in per model or
feature (`cache.models.<m>.semantic: true`), because a near match is never certain.

Only the final user text is fuzzy. Everything else — model, parameters, system prompt, earlier
turns, tenant — is part of an exact partition key, so a hit can only come from the same
conversation context. Within the partition: embed the text, take the nearest neighbours above
`semantic.threshold`, and for each, best first, check the guards (`policies.guards`: negation,
numbers, dates, entities, key terms, swapped words, order) and, if configured, a verification
call; the first survivor is served, replayed like an exact hit, with `x-levergate-cache:
semantic` and the similarity in `x-levergate-cache-similarity`.

Sits in FRONT after the exact cache (an exact hit never pays for an embedding) and before
routing. A miss goes on down and its answer is stored (whole, or a stream on clean completion)
under a fresh id, with the question's text, so later guards can compare against it. The embedder
or the index failing makes the request a plain miss, never a failed one.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from functools import partial
from typing import Any

from levergate.config import CacheRuleSettings
from levergate.core.call import Call
from levergate.core.embedder import Embedder
from levergate.core.reply import Completed, Event, EventSource, Reply
from levergate.core.service import Service
from levergate.layers.cache.checks import CacheChecks
from levergate.layers.cache.entries import (
    CacheView,
    answered_by,
    hit_headers,
    served,
    usage_meta,
)
from levergate.layers.cache.replay import assemble, replay, verdict
from levergate.layers.cache.thresholds import Thresholds
from levergate.policies.cache_policy import bypass_reason, clamped, namespace, rule_for
from levergate.policies.confidence import answer_text
from levergate.policies.fingerprint import fingerprint
from levergate.policies.guards import conflicts
from levergate.stores.entry import Entry, Form
from levergate.stores.vector import Partitions, Vector

log = logging.getLogger("levergate.cache")

NAME = "semantic"
SIMILARITY_HEADER = "x-levergate-cache-similarity"


class SemanticCache:
    def __init__(
        self,
        inner: Service,
        *,
        view: CacheView,
        embedder: Embedder,
        index: Partitions,
        verify: Service | None = None,
        thresholds: Thresholds | None = None,
        checks: CacheChecks | None = None,
    ) -> None:
        self._inner = inner
        self._view = view
        self._semantic = view.settings.semantic
        self._embedder = embedder
        self._index = index
        self._verify = verify
        self._guards = frozenset(view.settings.semantic.guards)
        # Per model or route asked (layers/cache/thresholds.py: swapped when the file changes).
        self._thresholds = thresholds or Thresholds(view.settings.semantic.threshold)
        self._checks = checks  # sampled lookups verified off the path (None: calibration off)
        self._band = view.settings.semantic.calibration.band
        if checks is not None:
            checks.bind(inner)
            checks.bind_finder(self._would_be)

    async def __call__(self, call: Call) -> Reply:
        if call.kind != "chat":
            return await self._inner(call)
        rule = rule_for(self._view.settings, model=call.model, feature=call.ctx.controls.feature)
        text = final_user_text(call.body)
        if not rule.semantic or text is None or bypass_reason(rule, call.body) is not None:
            return await self._inner(call)
        asked = clamped(call.ctx.controls.cache, max_ttl=self._view.settings.max_ttl_seconds)
        partition = self._partition(call)
        vector = await self._embed(text)
        if vector is None:
            return await self._inner(call)
        threshold = self._thresholds.of(call.model)
        # Drawn before the lookup, so what is sampled does not depend on what it finds.
        sampled = asked.lookup and self._checks is not None and self._checks.sampled()
        band: list[tuple[str, float]] | None = [] if sampled else None
        if asked.lookup:
            hit = await self._lookup(call, partition, text, vector, threshold=threshold,
                                     band=band)  # fmt: skip
            if hit is not None:
                return hit
        self._view.stats.lookup(NAME, "miss")
        reply = await self._inner(call)
        if band is not None:
            reply = self._check_miss(call, text, threshold, band, reply)
        trace = call.ctx.trace
        if not asked.store or trace.fallback is not None or trace.cascade_fallback:
            return reply
        store = _Store(self, partition, text, vector, rule, ttl=asked.ttl or rule.ttl_seconds,
                       origin=answered_by(trace))  # fmt: skip
        if isinstance(reply, Completed):
            await store.completed(reply)
            return reply
        return reply.through(store.stream)

    def _partition(self, call: Call) -> str:
        messages = list(call.body["messages"])
        messages[-1] = {**messages[-1], "content": ""}
        return fingerprint(
            {**call.body, "messages": messages},
            kind="chat:semantic",
            resolved_model=self._view.resolve(call.model, call.ctx.controls.feature),
            namespace=namespace(self._view.settings, call.ctx.principal.tenant),
        )

    async def _embed(self, text: str) -> list[float] | None:
        try:
            (vector,) = await self._embedder.embed([text])
        except Exception as exc:  # an optional accelerator: any failure is a miss
            self._view.stats.lookup(NAME, "unavailable")
            log.warning("semantic cache: embedding failed (%s: %s)", type(exc).__name__, exc)
            return None
        return vector

    async def _lookup(
        self,
        call: Call,
        partition: str,
        text: str,
        vector: list[float],
        *,
        threshold: float,
        band: list[tuple[str, float]] | None,
    ) -> Reply | None:
        """The hit, or None; `band` (a sampled lookup's): filled with the neighbours below the
        threshold down to the band's floor, best first, for the check off the path."""
        try:
            neighbours = await self._index.search(partition, vector, self._semantic.top_k)
        except ValueError as exc:  # a vector of another size: the embedder changed under us
            log.warning("semantic cache: search failed (%s)", exc)
            return None
        for key, score in neighbours:
            if score < threshold:
                if band is not None:
                    band.extend((k, s) for k, s in neighbours
                                if threshold - self._band <= s < threshold)  # fmt: skip
                break
            record = await self._view.entries.load(key)
            if record is None:
                await self._index.remove(partition, key)
                continue
            unpacked = _unpack(record)
            if unpacked is None:
                self._view.stats.corrupt.labels(NAME).inc()
                await self._view.entries.store.delete(key)
                await self._index.remove(partition, key)
                continue
            cached_text, entry = unpacked
            objections = conflicts(text, cached_text, enabled=self._guards)
            if not objections and not await self._verified(call, text, cached_text, entry):
                objections = ("verifier",)
            if objections:
                for guard in objections:
                    self._view.stats.rejected.labels(guard).inc()
                continue
            self._view.stats.lookup(NAME, "hit")
            hit = call.ctx.trace.cache = served(NAME, record.meta)
            self._view.stats.saved(NAME, hit.saved_input, hit.saved_output)
            headers = hit_headers(NAME, record, self._view.entries.wall())
            headers[SIMILARITY_HEADER] = f"{score:.4f}"
            if band is not None and self._checks is not None:
                self._checks.check(call, question=text, threshold=threshold, served=score,
                                   cached=_answer_of(entry))  # fmt: skip
            return replay(entry, kind=call.kind, stream=call.stream, headers=headers)
        return None

    def _check_miss(
        self, call: Call, text: str, threshold: float, band: list[tuple[str, float]], reply: Reply
    ) -> Reply:
        """Hand a sampled miss to the checks once its answer is known; the reply unchanged."""
        checks = self._checks
        assert checks is not None  # noqa: S101 - only sampled when there are checks
        done = partial(checks.check, call, question=text, threshold=threshold, band=band)
        if isinstance(reply, Completed):
            done(real=answer_text(reply.data) if reply.status == 200 else None)
            return reply

        async def watched(events: EventSource) -> EventSource:
            seen: list[Event] = []
            async for event in events:
                seen.append(event)
                yield event
            done(real=answer_text(assemble("chat", seen)))

        return reply.through(watched)

    async def _would_be(
        self, question: str, band: Sequence[tuple[str, float]]
    ) -> tuple[float, str] | None:
        """(similarity, cached answer) of the first band neighbour the guards let through: the
        hit a threshold at its similarity would serve (None: none would)."""
        for key, score in band:
            record = await self._view.entries.load(key)
            unpacked = None if record is None else _unpack(record)
            if unpacked is None:
                continue
            cached_text, entry = unpacked
            if not conflicts(question, cached_text, enabled=self._guards):
                return score, _answer_of(entry)
        return None

    async def _verified(self, call: Call, text: str, cached_text: str, entry: Entry) -> bool:
        """Ask the configured model whether the cached answer answers the new question."""
        if self._verify is None or not self._semantic.verify_model:
            return True
        content = _answer_of(entry)
        prompt = _VERIFY_PROMPT.format(question=text, original=cached_text, answer=content[:2000])
        probe = call.with_body(
            model=self._semantic.verify_model, messages=[{"role": "user", "content": prompt}],
            temperature=0, max_tokens=1, stream=False,
        )  # fmt: skip
        try:
            reply = await self._verify(probe)
        except Exception as exc:  # a failed check refuses the hit; it never fails
            log.warning("semantic cache: verification failed (%s)", exc)
            return False
        if not isinstance(reply, Completed):
            return False
        choice = (reply.data.get("choices") or [{}])[0]
        return str((choice.get("message") or {}).get("content") or "").strip().lower() == "yes"

    async def remember(
        self, partition: str, text: str, vector: list[float] | Vector, entry: Entry, ttl: float
    ) -> None:
        key = f"sem:{partition[:32]}:{os.urandom(8).hex()}"
        parts = (text.encode(), bytes([int(entry.form)]), *entry.parts)
        await self._view.entries.save(key, Form.BLOB, parts, ttl=ttl, meta=entry.meta)
        try:
            evicted = await self._index.add(partition, key, vector)
        except ValueError as exc:  # a vector of another size: the embedder changed under us
            log.warning("semantic cache: cannot index the answer (%s)", exc)
            await self._view.entries.store.delete(key)
            return
        for old in evicted:
            await self._view.entries.store.delete(old)


class _Store:
    """Writes one answer into the semantic cache once it is known to be complete and clean."""

    def __init__(
        self,
        cache: SemanticCache,
        partition: str,
        text: str,
        vector: list[float],
        rule: CacheRuleSettings,
        *,
        ttl: float,
        origin: tuple[str, str],
    ) -> None:
        self._cache = cache
        self._origin = origin
        self._partition = partition
        self._text = text
        self._vector = vector
        self._rule = rule
        self._ttl = ttl

    async def completed(self, reply: Completed) -> None:
        if reply.status != 200:
            return
        why = verdict(reply.data, allow_tools=self._rule.cache_tool_calls)
        if why is not None:
            self._cache._view.stats.not_stored.labels(NAME, why).inc()
            return
        entry = Entry(Form.COMPLETED, (reply.raw,), 0.0, 0.0, self._meta(reply.usage))
        await self._remember(entry)

    async def stream(self, events: EventSource) -> EventSource:
        seen: list[Event] = []
        async for event in events:
            seen.append(event)
            yield event
        whole = assemble("chat", seen)
        why = verdict(whole, allow_tools=self._rule.cache_tool_calls)
        if why is not None:
            self._cache._view.stats.not_stored.labels(NAME, why).inc()
            return
        meta = self._meta(whole.get("usage"))
        await self._remember(Entry(Form.STREAM, tuple(e.data for e in seen), 0.0, 0.0, meta))

    def _meta(self, usage: Any) -> bytes:
        alias, model = self._origin
        return usage_meta(usage, alias=alias, model=model)

    async def _remember(self, entry: Entry) -> None:
        await self._cache.remember(self._partition, self._text, self._vector, entry, self._ttl)


def final_user_text(body: Any) -> str | None:
    """The text of the last message when it is the user's and plain text, else None."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return None
    last = messages[-1]
    if not isinstance(last, dict) or last.get("role") != "user":
        return None
    content = last.get("content")
    if isinstance(content, str):
        return content.strip() or None
    if isinstance(content, list) and all(
        isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
        for p in content
    ):
        return "\n".join(p["text"] for p in content).strip() or None
    return None


def _answer_of(entry: Entry) -> str:
    """The text of a cached chat answer ("" when it has none)."""
    answer = replay(entry, kind="chat", stream=False, headers={})
    if not isinstance(answer, Completed):
        return ""
    return answer_text(answer.data) or ""


def _unpack(record: Entry) -> tuple[str, Entry] | None:
    """(question text, answer entry) from a semantic record, or None if it is not one."""
    if len(record.parts) < 3 or len(record.parts[1]) != 1:
        return None
    text, form, *parts = record.parts
    try:
        inner_form = Form(form[0])
    except ValueError:
        return None
    return text.decode(errors="replace"), Entry(
        inner_form, tuple(parts), record.created, record.expires
    )


_VERIFY_PROMPT = (
    "A cache holds an answer to an earlier question. Decide whether that answer is fully "
    "correct for the new question too. Reply with exactly one word: yes or no.\n\n"
    "Earlier question: {original}\nNew question: {question}\nCached answer: {answer}"
)
