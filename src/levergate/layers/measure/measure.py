"""Measure: the outermost layer, so it sees every request, including the ones other layers refuse.

Per request it builds one `RequestRecord` (`layers.measure.record`): total time, TTFT at the
first *generated* token (not the first byte, not the role preamble), the mean inter-token gap,
tokens in four buckets (each provider's usage convention, `policies.pricing`), cost at the rates
of the alias that answered (a fallback's, not the one asked for) plus the side spends, what each
lever saved (`layers.measure.ledger`), the outcome, and the gateway's own overhead: total time minus
the time spent waiting on the upstream (and, for streams, minus the time the client took to
accept each chunk). What the layers below did — the tenant, what answered, the cache outcome,
attempts, the fallback — it reads from the call's typed record (`core.call.Trace`). The record
goes to every sink in order (`Sink`); Prometheus and the ledger's dollar counters are first.

When an upstream reported no usage (llama.cpp's server sends none in a stream) the output is
counted here (`core.tokenizer.Tokenizer`) and the record says it was counted, not reported;
nothing is counted when the upstream did report it.

The answer goes out before the bookkeeping: a record is built in a callback on the next turn of
the event loop (after a whole answer was returned; after a stream closed, whichever way), and a
stream's chunk is handed on before it is inspected for a token (its arrival time is taken
first, so TTFT is the same). After an idle moment the first pass through Python code runs
several times slower than a warm one (caches gone), so work moved behind the write is what it
would have added to the client's latency at low load. A sink that raises is logged once and
counted (`levergate_sink_errors_total`); the request never sees it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from levergate.catalog import Catalog
from levergate.core.call import CacheOutcome, Call
from levergate.core.reply import Completed, Event, EventSource, Reply
from levergate.core.service import Service
from levergate.core.tokenizer import Tokenizer, TokenSource
from levergate.errors import LevergateError
from levergate.layers.measure.ledger import Ledger, LedgerSink
from levergate.layers.measure.prometheus import PrometheusSink, Telemetry
from levergate.layers.measure.record import (
    CANCELLED,
    OK,
    RequestRecord,
    Sink,
    Timings,
    Tokens,
)
from levergate.policies.pricing import from_usage
from levergate.protocol.openai import generated_text, has_generated_token
from levergate.protocol.tokens import TiktokenCounter

__all__ = ["OVERHEAD_HEADER", "Measure", "Telemetry"]

log = logging.getLogger("levergate.measure")

OVERHEAD_HEADER = "x-levergate-overhead-ms"
CLIENT_CLOSED = 499  # nginx's status for a request its client abandoned
NONE: frozenset[str] = frozenset()


@dataclass(slots=True)
class _Seen:
    """What Measure saw of one answer, gathered while it went out."""

    outcome: str = OK
    status: int = 200
    error: str | None = None
    usage: dict[str, Any] | None = None
    # The raw chunks carrying generated text (bytes, which the garbage collector never walks),
    # parsed again only when no usage arrived and the output has to be counted here.
    generated: list[bytes] = field(default_factory=list)
    answer: Mapping[str, Any] | None = None  # a whole answer, parsed already
    ttft: float | None = None
    inter_token: float | None = None
    consumer_seconds: float = 0.0
    total: float | None = None

    @classmethod
    def failed(cls, exc: BaseException) -> _Seen:
        if isinstance(exc, LevergateError):
            return cls(exc.type, exc.http_status, type(exc).__name__)
        if isinstance(exc, asyncio.CancelledError | GeneratorExit):
            return cls(CANCELLED, CLIENT_CLOSED, type(exc).__name__)
        return cls("internal_error", 500, type(exc).__name__)


class Measure:
    def __init__(
        self,
        inner: Service,
        *,
        telemetry: Telemetry,
        catalog: Catalog,
        sinks: Sequence[Sink] = (),
        tokenizer: Tokenizer | None = None,
    ) -> None:
        self._inner = inner
        self._t = telemetry
        self._ledger = Ledger(catalog)
        # Prometheus first (today's metrics and the ledger's dollars); the request log and
        # the dashboard follow.
        ours: tuple[Sink, ...] = (PrometheusSink(telemetry),)
        if telemetry.ledger is not None:
            ours += (LedgerSink(telemetry.ledger),)
        self._sinks: tuple[Sink, ...] = (*ours, *sinks)
        self._tokenizer = tokenizer or TiktokenCounter()
        self._sink_failed: set[str] = set()

    async def __call__(self, call: Call) -> Reply:
        self._t.in_flight.inc()
        try:
            reply = await self._inner(call)
        except BaseException as exc:
            self._t.in_flight.dec()
            self._later(call, _Seen.failed(exc))
            raise
        trace = call.ctx.trace
        total = trace.elapsed()
        overhead = max(0.0, total - trace.upstream_seconds)
        reply.headers[OVERHEAD_HEADER] = f"{overhead * 1000:.3f}"
        if isinstance(reply, Completed):
            asyncio.get_running_loop().call_soon(self._completed, call, reply, total)
            return reply
        return reply.through(lambda events: self._watch(call, events))

    def _completed(self, call: Call, reply: Completed, total: float) -> None:
        self._t.in_flight.dec()
        seen = _Seen(status=reply.status, total=total)
        cache = call.ctx.trace.cache
        # A cached answer's usage was not spent here: skip parsing it (its buckets are in the
        # cache's result; a shared one's is parsed already, and tells what coalescing saved).
        if cache is None or cache.outcome is not CacheOutcome.HIT:
            seen.usage = reply.usage
            if seen.usage is None and reply.status == 200:
                seen.answer = reply.data
        self._finish(call, seen)

    async def _watch(self, call: Call, events: EventSource) -> EventSource:
        started = call.ctx.trace.started
        first: float | None = None
        last = 0.0
        gaps = 0
        seen = _Seen(outcome=CANCELLED, status=CLIENT_CLOSED)
        generated = seen.generated
        consumer = 0.0
        sent = False
        try:
            async for event in events:
                handed = time.perf_counter()
                sent = True
                yield event
                consumer += time.perf_counter() - handed
                if first is None:
                    if has_generated_token(event.json()):
                        first = last = handed
                        generated.append(event.data)
                elif _may_carry_token(event.data) and has_generated_token(event.json()):
                    last = handed
                    gaps += 1
                    generated.append(event.data)
                if (found := event.usage()) is not None:
                    seen.usage = found
            seen.outcome, seen.status = OK, 200
        except BaseException as exc:
            failed = _Seen.failed(exc)
            seen.outcome, seen.error = failed.outcome, failed.error
            # Once an event went out the client has its 200; an error ends the stream in-band.
            seen.status = failed.status if failed.outcome == CANCELLED or not sent else 200
            raise
        finally:
            self._t.in_flight.dec()
            seen.consumer_seconds = consumer
            if first is not None:
                seen.ttft = first - started
                seen.inter_token = (last - first) / gaps if gaps else None
            self._later(call, seen)

    def _later(self, call: Call, seen: _Seen) -> None:
        """Build and emit the record on the next loop turn (now, if no loop runs any more)."""
        seen.total = call.ctx.trace.elapsed() if seen.total is None else seen.total
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._finish(call, seen)
            return
        loop.call_soon(self._finish, call, seen)

    def _finish(self, call: Call, seen: _Seen) -> None:
        try:
            record = self._record(call, seen)
        except Exception as exc:  # a record that cannot be built (a tokenizer failing) is lost
            self._failed("record", exc)
            return
        self._emit(record)

    def _record(self, call: Call, seen: _Seen) -> RequestRecord:
        """The finished request as one value."""
        trace = call.ctx.trace
        total = trace.elapsed() if seen.total is None else seen.total
        overhead = max(0.0, total - trace.upstream_seconds - seen.consumer_seconds)
        answered = trace.alias or call.model
        tokens = self._tokens(call, seen, answered)
        bill = self._ledger.bill(call, tokens, seen.usage)
        return RequestRecord(
            request_id=call.ctx.request_id,
            route=call.kind,
            tenant=trace.tenant,
            feature=call.ctx.feature,
            model=call.model,
            alias=trace.alias,
            upstream=trace.upstream,
            upstream_model=trace.upstream_model,
            outcome=seen.outcome,
            status=seen.status,
            error=seen.error,
            timings=Timings(
                total=total,
                upstream=trace.upstream_seconds,
                overhead=overhead,
                ttft=seen.ttft,
                inter_token=seen.inter_token,
            ),
            tokens=tokens,
            cost_usd=bill.cost_usd,
            cache=trace.cache,
            attempts=trace.attempts,
            retries=trace.retries,
            fallback=trace.fallback,
            failed_endpoints=frozenset(trace.failed_endpoints) if trace.failed_endpoints else NONE,
            savings=bill.savings,
            notes=tuple(trace.notes) if trace.notes else (),
            key_id=trace.key_id,
            side=bill.side,
            batch=trace.batch,
            expected_cached=trace.expected_cached,
        )

    def _tokens(self, call: Call, seen: _Seen, answered: str) -> Tokens:
        cache = call.ctx.trace.cache
        if cache is not None and cache.free:
            # Served by a cache or shared with an identical request in flight: nothing spent
            # here (the cache layers count what it saved), so nothing is counted twice.
            return Tokens()
        tokens = from_usage(seen.usage)
        if tokens.output_source is TokenSource.REPORTED:
            return tokens
        chunks = [seen.answer] if seen.answer is not None else map(_parsed, seen.generated)
        text = "".join(generated_text(chunk) for chunk in chunks)
        model = call.ctx.trace.upstream_model or answered
        count = self._tokenizer.count(text, model=model)
        return tokens._replace(output=count.tokens, output_source=count.how)

    def _emit(self, record: RequestRecord) -> None:
        for sink in self._sinks:
            try:
                sink.emit(record)
            except Exception as exc:  # a sink never breaks a request: logged once, counted always
                self._failed(type(sink).__name__, exc)

    def _failed(self, name: str, exc: Exception) -> None:
        """Count the failure; log its first traceback."""
        self._t.child(self._t.sink_errors, name).inc()
        if name not in self._sink_failed:
            self._sink_failed.add(name)
            log.error("measure: %s failed (logged once; counted in metrics)", name, exc_info=exc)


def _parsed(data: bytes) -> Mapping[str, Any]:
    return Event(data).json()


def _may_carry_token(data: bytes) -> bool:
    """A byte-level pre-check so most chunks are judged without parsing them twice. On the
    keys only: upstreams write JSON in every spacing (`"content": "` from Python servers)."""
    return (
        b'"content"' in data or b'"text"' in data or b'"tool_calls"' in data
        or b'.delta"' in data  # a Responses delta event ("type":"response.output_text.delta")
    )  # fmt: skip
