"""Measure: the outermost layer, so it sees every request, including the ones other layers refuse.

Per request it records total time, TTFT at the first *generated* token (not the first byte, not
the role preamble), the mean inter-token gap, input / output / cached tokens, cost from the price
table, the outcome, and the gateway's own overhead: total time minus the time spent waiting on
the upstream (and, for streams, minus the time the client took to accept each chunk). Histograms
carry route, model, upstream and feature labels so p50/p95/p99 follow for each.

For a stream everything is recorded when the stream *closes*, whichever way it closes.

The answer goes out before the bookkeeping: a whole answer's metrics are recorded in a callback
on the next turn of the event loop, and a stream's chunk is handed on before it is inspected
for a token (its arrival time is taken first, so TTFT is the same). After an idle moment the
first pass through Python code runs several times slower than a warm one (caches gone), so work
moved behind the write is what it would have added to the client's latency at low load.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from levergate.config import WILDCARD, Metrics, Price
from levergate.core.call import Call
from levergate.core.reply import Completed, EventSource, Reply
from levergate.core.service import Service
from levergate.errors import LevergateError
from levergate.protocol.openai import has_generated_token, usage_tokens

OVERHEAD_HEADER = "x-levergate-overhead-ms"
_FREE = frozenset({"hit", "semantic", "coalesced"})
_MAX_LABEL_VALUES = 100  # distinct client-chosen label values; later ones count as "other"


class Telemetry:
    """The Prometheus metrics of one gateway, in its own registry (no global state)."""

    def __init__(self, settings: Metrics) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        labels = ("route", "model", "upstream", "feature")
        buckets = settings.latency_buckets
        reg = self.registry
        self.requests = Counter(
            "levergate_requests", "Requests by outcome.", (*labels, "outcome"), registry=reg
        )
        self.total = Histogram(
            "levergate_request_seconds",
            "Time from arrival to the last byte of the answer.",
            (*labels, "outcome"),
            buckets=buckets,
            registry=reg,
        )
        self.ttft = Histogram(
            "levergate_ttft_seconds",
            "Time from arrival to the first generated token of a stream.",
            labels,
            buckets=buckets,
            registry=reg,
        )
        self.itl = Histogram(
            "levergate_inter_token_seconds",
            "Mean gap between generated chunks of a stream, one sample per stream.",
            labels,
            buckets=buckets,
            registry=reg,
        )
        self.overhead = Histogram(
            "levergate_overhead_seconds",
            "Gateway time per request: total minus upstream wait (and client writes for streams).",
            ("route",),
            buckets=settings.overhead_buckets,
            registry=reg,
        )
        self.tokens = Counter(
            "levergate_tokens",
            "Tokens by kind: input (cached included, OpenAI convention), output, cached.",
            ("model", "upstream", "feature", "kind"),
            registry=reg,
        )
        self.cost = Counter(
            "levergate_cost_usd", "Cost from the price table.", ("model", "upstream", "feature"),
            registry=reg,
        )  # fmt: skip
        self.in_flight = Gauge("levergate_in_flight", "Requests being served.", registry=reg)
        self._seen: dict[str, set[str]] = {"feature": set(), "model": set()}
        self._children: dict[tuple[str, tuple[str, ...]], Any] = {}

    def bounded(self, kind: str, value: str) -> str:
        """Feature tags, and model names behind a `*` route, come from clients: bound how many
        distinct values become labels so the metrics cannot grow without end."""
        seen = self._seen[kind]
        if value in seen or not value:
            return value
        if len(seen) >= _MAX_LABEL_VALUES:
            return "other"
        seen.add(value)
        return value

    def child(self, metric: Counter | Histogram, *labels: str) -> Any:
        """`metric.labels(*labels)`, memoised: the lookup is most of the cost of an update."""
        key = (metric._name, labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return found


class Measure:
    def __init__(
        self, inner: Service, *, telemetry: Telemetry, prices: Mapping[str, Price]
    ) -> None:
        self._inner = inner
        self._t = telemetry
        self._prices = prices
        self._default_price = prices.get(WILDCARD, Price())

    async def __call__(self, call: Call) -> Reply:
        self._t.in_flight.inc()
        try:
            reply = await self._inner(call)
        except BaseException as exc:
            self._t.in_flight.dec()
            self._record(call, _outcome(exc), None, consumer_seconds=0.0)
            raise
        trace = call.ctx.trace
        total = trace.elapsed()
        overhead = max(0.0, total - trace.upstream_seconds)
        reply.headers[OVERHEAD_HEADER] = f"{overhead * 1000:.3f}"
        if isinstance(reply, Completed):
            asyncio.get_running_loop().call_soon(self._record_completed, call, reply, total)
            return reply
        return reply.through(lambda events: self._watch(call, events))

    def _record_completed(self, call: Call, reply: Completed, total: float) -> None:
        self._t.in_flight.dec()
        # A cached answer's usage is not spent here: skip parsing it (see `_record`).
        free = call.ctx.trace.annotations.get("cache") in _FREE
        usage = None if free else reply.usage
        self._record(call, "ok", usage, consumer_seconds=0.0, total=total)

    async def _watch(self, call: Call, events: EventSource) -> EventSource:
        started = call.ctx.trace.started
        first: float | None = None
        last = 0.0
        gaps = 0
        usage: dict[str, Any] | None = None
        consumer = 0.0
        outcome = "cancelled"
        try:
            async for event in events:
                handed = time.perf_counter()
                yield event
                consumer += time.perf_counter() - handed
                if first is None:
                    if has_generated_token(event.json()):
                        first = last = handed
                elif _may_carry_token(event.data) and has_generated_token(event.json()):
                    last = handed
                    gaps += 1
                if b'"usage"' in event.data:  # any JSON spacing; decided on the parse
                    found = event.json().get("usage")
                    usage = found if isinstance(found, dict) else usage
            outcome = "ok"
        except BaseException as exc:
            outcome = _outcome(exc)
            raise
        finally:
            self._t.in_flight.dec()
            labels = self._labels(call)
            if first is not None:
                self._t.child(self._t.ttft, *labels).observe(first - started)
                if gaps:
                    self._t.child(self._t.itl, *labels).observe((last - first) / gaps)
            self._record(call, outcome, usage, consumer_seconds=consumer)

    def _labels(self, call: Call) -> tuple[str, str, str, str]:
        trace = call.ctx.trace
        bounded = self._t.bounded
        model = bounded("model", call.model)
        return (call.kind, model, trace.upstream, bounded("feature", call.ctx.feature))

    def _record(
        self,
        call: Call,
        outcome: str,
        usage: dict[str, Any] | None,
        *,
        consumer_seconds: float,
        total: float | None = None,
    ) -> None:
        trace = call.ctx.trace
        total = trace.elapsed() if total is None else total
        overhead = max(0.0, total - trace.upstream_seconds - consumer_seconds)
        t = self._t
        route, model, upstream, feature = labels = self._labels(call)
        t.child(t.requests, *labels, outcome).inc()
        t.child(t.total, *labels, outcome).observe(total)
        t.child(t.overhead, route).observe(overhead)
        # An answer from a cache (or shared with an identical request in flight) cost nothing
        # here: the cache layers count what it saved, so it is not counted as spent twice.
        if usage and call.ctx.trace.annotations.get("cache") not in _FREE:
            prompt, completion, cached = usage_tokens(usage)
            t.child(t.tokens, model, upstream, feature, "input").inc(prompt)
            t.child(t.tokens, model, upstream, feature, "output").inc(completion)
            if cached:
                t.child(t.tokens, model, upstream, feature, "cached").inc(cached)
            price = self._prices.get(call.model, self._default_price)
            cost = price.cost(prompt, completion, cached)
            if cost:
                t.child(t.cost, model, upstream, feature).inc(cost)


def _outcome(exc: BaseException) -> str:
    if isinstance(exc, LevergateError):
        return exc.type
    if isinstance(exc, asyncio.CancelledError | GeneratorExit):
        return "cancelled"
    return "internal_error"


def _may_carry_token(data: bytes) -> bool:
    """A byte-level pre-check so most chunks are judged without parsing them twice. On the
    keys only: upstreams write JSON in every spacing (`"content": "` from Python servers)."""
    return b'"content"' in data or b'"text"' in data or b'"tool_calls"' in data
