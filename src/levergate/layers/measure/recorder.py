"""`Recorder`: how a finished request becomes its one record and reaches every sink.

Built once per gateway by `build_pipeline` and shared by every path a request can finish on:
`Measure` (the outermost layer: proxy, in-process, batch lines and async requests run through
the pipeline, so through it) and the features that answer without the pipeline (a deferred
batch line's answer comes back from the provider's batch API, batch/defer_results.py). Each
hands over the call (its `Trace` says what the layers decided) and what was seen of the answer
(`Seen`); the recorder prices it (`Ledger`: the four token buckets at the rates of the alias
that answered, the side spends, the savings by lever), builds the record with its one
constructor (`RequestRecord.of`) and hands it to the sinks in order: Prometheus, the ledger's
dollars, key budgets, the prompt-cache sink, then `Deps.sinks` (a dashboard); then the
tracers (otel/) and the observers, which get the call and what was seen of the answer too (the
request log, which may log bodies: requestlog/). A sink, tracer or observer that raises is
logged once and counted (`levergate_sink_errors_total`); the request never sees it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from levergate.catalog import Catalog
from levergate.core.call import CacheOutcome, Call
from levergate.core.reply import Completed, Event
from levergate.core.tokenizer import Tokenizer, TokenSource
from levergate.errors import LevergateError
from levergate.layers.measure.ledger import Ledger, LedgerSink
from levergate.layers.measure.prometheus import PrometheusSink, Telemetry
from levergate.layers.measure.record import CANCELLED, OK, RequestRecord, Sink, Timings, Tokens
from levergate.layers.measure.shadow_labels import ShadowLabels
from levergate.policies.pricing import Bill, from_usage
from levergate.policies.tiers import Tier
from levergate.protocol.openai.body import generated_text
from levergate.protocol.tokens import TiktokenCounter

if TYPE_CHECKING:
    from levergate.core.spans import Internal, Spans

__all__ = ["CLIENT_CLOSED", "Observer", "Recorder", "Seen", "Tracer"]

log = logging.getLogger("levergate.measure")

CLIENT_CLOSED = 499  # nginx's status for a request its client abandoned
# Read once: a member read from its class costs ~900 instructions on CPython 3.11 (callgrind).
_NONE, _BATCH, _MISS = TokenSource.NONE, Tier.BATCH, CacheOutcome.MISS
# A `Timings` made at once, as `RequestRecord.of` makes its record (layers/measure/record.py).
_new = tuple.__new__
# What a request served by a cache (or shared with another in flight) spent: one immutable value.
_NOTHING_SPENT = Tokens()


class Tracer(Protocol):
    """Where a traced request goes with its trace context (levergate/otel/spans.py)."""

    def export(self, record: RequestRecord, spans: Spans) -> None: ...

    def export_internal(self, spans: Sequence[Internal], *, now: float) -> None:
        """Spans of levergate's own work (a workflow and its steps), times on the clock that
        reads `now`."""
        ...


class Observer(Protocol):
    """A feature that wants each finished request with its call and what was seen of its
    answer, not only the record: the request log, which logs bodies where enabled
    (levergate/requestlog/). Called on the event loop like a sink: it must be quick."""

    def observe(self, record: RequestRecord, call: Call, seen: Seen) -> None: ...


@dataclass(slots=True)
class Seen:
    """What was seen of one answer, gathered while it went out."""

    outcome: str = OK
    status: int = 200
    error: str | None = None
    usage: dict[str, Any] | None = None
    # The raw chunks carrying generated text (bytes, which the garbage collector never walks),
    # parsed again only when no usage arrived and the output has to be counted here.
    generated: list[bytes] = field(default_factory=list)
    answer: Mapping[str, Any] | None = None  # a whole answer, parsed already
    reply: Completed | None = None  # a whole answer as it went out (for an observer's bodies)
    ttft: float | None = None
    inter_token: float | None = None
    consumer_seconds: float = 0.0
    total: float | None = None
    # Priced before a whole answer went out (its cost headers): the record reuses it, and the
    # tier it was priced at and whether that was assumed (`served_at`'s answer).
    priced: tuple[Tokens, Bill, Tier | None, bool] | None = None
    # The service tier the answer says served it (its `service_tier`; None: it said none).
    served: Tier | None = None

    @classmethod
    def failed(cls, exc: BaseException) -> Seen:
        if isinstance(exc, LevergateError):
            return cls(exc.type, exc.http_status, type(exc).__name__)
        if isinstance(exc, asyncio.CancelledError | GeneratorExit):
            return cls(CANCELLED, CLIENT_CLOSED, type(exc).__name__)
        return cls("internal_error", 500, type(exc).__name__)


class Recorder:
    def __init__(
        self,
        telemetry: Telemetry,
        *,
        catalog: Catalog,
        sinks: Sequence[Sink] = (),
        tokenizer: Tokenizer | None = None,
        shadow_labels: ShadowLabels | None = None,
    ) -> None:
        self.telemetry = telemetry
        # Each shadow comparison, after its request's record (layers/measure/shadow_labels.py).
        self.shadow_labels = shadow_labels or ShadowLabels()
        self._ledger = Ledger(catalog)
        # Prometheus first (today's metrics and the ledger's dollars); the request log and
        # the dashboard follow.
        ours: tuple[Sink, ...] = (PrometheusSink(telemetry),)
        if telemetry.ledger is not None:
            ours += (LedgerSink(telemetry.ledger),)
        self.extra = tuple(sinks)  # beyond Prometheus and the ledger
        self.sinks: tuple[Sink, ...] = (*ours, *sinks)
        self._tokenizer = tokenizer or TiktokenCounter()
        self._sink_failed: set[str] = set()
        self._tracers: tuple[Tracer, ...] = ()
        self._observers: tuple[Observer, ...] = ()

    def trace_to(self, tracer: Tracer) -> None:
        """Hand every finished request that has a trace context (`Trace.spans`: tracing is on)
        to `tracer` with its record (levergate/otel/)."""
        self._tracers = (*self._tracers, tracer)

    @property
    def tracing(self) -> bool:
        """Whether a tracer takes spans (`otel.endpoint` is set)."""
        return bool(self._tracers)

    def trace_internal(self, spans: Sequence[Internal], *, now: float) -> None:
        """Hand spans of levergate's own work to every tracer (a failing one is logged once
        and counted, as a sink is)."""
        for tracer in self._tracers:
            try:
                tracer.export_internal(spans, now=now)
            except Exception as exc:
                self._failed(type(tracer).__name__, exc)

    def observe(self, observer: Observer) -> None:
        """Hand every finished request's record, call and `Seen` to `observer` too."""
        self._observers = (*self._observers, observer)

    def finish(self, call: Call, seen: Seen) -> None:
        """Build the call's record and emit it; a record that cannot be built (a tokenizer
        failing) is logged once, counted, and lost."""
        try:
            record = self.record(call, seen)
        except Exception as exc:
            self._failed("record", exc)
            return
        for sink in self.sinks:  # here, not in a method of its own: a call fewer a request
            try:
                sink.emit(record)
            except Exception as exc:  # a sink never breaks a request: logged once, counted always
                self._failed(type(sink).__name__, exc)
        if self._tracers and (spans := call.ctx.trace.spans) is not None:
            for tracer in self._tracers:
                try:
                    tracer.export(record, spans)
                except Exception as exc:  # like a sink: never the request's problem
                    self._failed(type(tracer).__name__, exc)
        for observer in self._observers:
            try:
                observer.observe(record, call, seen)
            except Exception as exc:  # like a sink
                self._failed(type(observer).__name__, exc)

    def record(self, call: Call, seen: Seen) -> RequestRecord:
        """The finished request as one value."""
        trace = call.ctx.trace
        total = trace.elapsed() if seen.total is None else seen.total
        overhead = max(0.0, total - trace.upstream_seconds - seen.consumer_seconds)
        if seen.priced is not None:
            tokens, bill, tier, assumed = seen.priced
        else:
            tier, assumed = served_at(call, seen)
            tokens = self.tokens(call, seen, trace.alias or call.model)
            bill = self._ledger.bill(call, tokens, seen.usage, tier=tier)
        # `Timings(...)` without its generated `__new__` (a frame a request), fields in order.
        timings = _new(Timings, (total, trace.upstream_seconds, overhead, seen.ttft,
                                 seen.inter_token))  # fmt: skip
        return RequestRecord.of(call, outcome=seen.outcome, status=seen.status,
                                error=seen.error, timings=timings, tokens=tokens,
                                bill=bill, tier=tier, tier_assumed=assumed)  # fmt: skip

    def price(self, call: Call, seen: Seen) -> Bill | None:
        """A whole answer's tokens and bill before it goes out (its cost headers), kept on
        `seen` for its record; None when they cannot be worked out (the record's own attempt
        then logs and counts it)."""
        try:
            tokens = self.tokens(call, seen, call.ctx.trace.alias or call.model)
            tier, assumed = served_at(call, seen)
            bill = self._ledger.bill(call, tokens, seen.usage, tier=tier)
            seen.priced = tokens, bill, tier, assumed
        except Exception:
            return None
        return bill

    def tokens(self, call: Call, seen: Seen, answered: str) -> Tokens:
        cache = call.ctx.trace.cache
        if cache is not None and cache.outcome is not _MISS:  # `cache.free`, without its call
            # Served by a cache or shared with an identical request in flight: nothing spent
            # here (the cache layers count what it saved), so nothing is counted twice.
            return _NOTHING_SPENT
        tokens = from_usage(seen.usage)
        if tokens.output_source is not _NONE:  # reported, or counted below (usage.py)
            return tokens
        chunks = [seen.answer] if seen.answer is not None else map(_parsed, seen.generated)
        text = "".join(generated_text(chunk) for chunk in chunks)
        model = call.ctx.trace.upstream_model or answered
        count = self._tokenizer.count(text, model=model)
        return tokens._replace(output=count.tokens, output_source=count.how)

    def _failed(self, name: str, exc: Exception) -> None:
        """Count the failure; log its first traceback."""
        self.telemetry.child(self.telemetry.sink_errors, name).inc()
        if name not in self._sink_failed:
            self._sink_failed.add(name)
            log.error("measure: %s failed (logged once; counted in metrics)", name, exc_info=exc)


def served_at(call: Call, seen: Seen) -> tuple[Tier | None, bool]:
    """The tier the request is priced at, and whether it was assumed: the provider's batch API;
    the answer's own `service_tier`; else the tier asked for (assumed: the provider said
    nothing); None for the provider's default (nothing asked, nothing said) or no answer."""
    trace = call.ctx.trace
    if trace.batch:
        return _BATCH, False
    if seen.served is not None:
        return seen.served, False
    if trace.tier is not None and seen.outcome == OK:
        return trace.tier, True
    return None, False


def _parsed(data: bytes) -> Mapping[str, Any]:
    return Event(data).json()
