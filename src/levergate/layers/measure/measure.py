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

When an upstream reported no usage (llama.cpp's server sends none in a stream) a stream's usage
was counted further down (`layers/usage.py`, flagged in the block) and the record says it was
counted, not reported; a whole answer without usage has its output counted here
(`core.tokenizer.Tokenizer`). Nothing is counted when the upstream did report it. Measure
gathers what it saw (`Seen`); the gateway's one `Recorder` (layers/measure/recorder.py) prices
it, builds the record and hands it to the sinks — the same recorder every other way a request
can finish goes through (a deferred batch line's answer).

The answer goes out before the bookkeeping: a record is built in a callback on the next turn of
the event loop (after a whole answer was returned; after a stream closed, whichever way), and a
stream's chunk is handed on before it is inspected for a token (its arrival time is taken
first, so TTFT is the same). After an idle moment the first pass through Python code runs
several times slower than a warm one (caches gone), so work moved behind the write is what it
would have added to the client's latency at low load. The exception: with the cost headers on
(`server.response_headers.cost`, layers/measure/disclose.py) a whole answer is priced before it
goes out, since its headers carry the price; the record then reuses that bill. A sink that
raises is logged once and counted (`levergate_sink_errors_total`); the request never sees it.
"""

from __future__ import annotations

import asyncio
import logging

from levergate.config.server import ResponseHeadersSettings
from levergate.core.call import CacheOutcome, Call
from levergate.core.reply import Completed, Ended, Event, Reply, Watcher
from levergate.core.service import Service
from levergate.core.spans import begin as begin_spans
from levergate.layers.measure.disclose import Disclose
from levergate.layers.measure.prometheus import Telemetry
from levergate.layers.measure.record import CANCELLED, OK
from levergate.layers.measure.recorder import CLIENT_CLOSED, Recorder, Seen
from levergate.policies.tiers import served_tier
from levergate.protocol.openai.body import has_generated_token

__all__ = ["OVERHEAD_HEADER", "Measure", "Telemetry"]

log = logging.getLogger("levergate.measure")

OVERHEAD_HEADER = "x-levergate-overhead-ms"
# Read once: a member read from its class costs ~900 instructions on CPython 3.11 (callgrind).
_HIT = CacheOutcome.HIT


class Measure:
    def __init__(
        self,
        inner: Service,
        *,
        recorder: Recorder,
        headers: ResponseHeadersSettings | None = None,
        record: bool = True,
        tracing: float | None = None,
    ) -> None:
        self._inner = inner
        # The sample ratio when tracing is on (`otel.endpoint`): each call gets its trace
        # context (core/spans.py); None: off, nothing is done.
        self._tracing = tracing
        # False: metrics are off and no sink wants records, only the headers are asked for;
        # then nothing is timed, recorded or watched (a stream is passed on untouched).
        self._record_requests = record
        # The x-levergate-* headers on what the request did (None: all off), and whether a
        # whole answer is priced before it goes out (for its cost headers).
        self._disclose = Disclose.of(headers) if headers is not None else None
        self._price_first = self._disclose is not None and headers is not None and headers.cost
        self._recorder = recorder
        self._serving = recorder.telemetry.serving  # levergate_in_flight
        self._finish = recorder.finish
        # The recorder's pricing, bound once (a wrapper method was one more call a request).
        self._price = recorder.price

    async def __call__(self, call: Call) -> Reply:
        if not self._record_requests:
            return await self._headers_only(call)
        if self._tracing is not None:  # the request's span starts with its trace
            ctx = call.ctx
            trace = ctx.trace
            trace.spans = begin_spans(ctx.headers, self._tracing, ctx.controls.trace,
                                      trace.started)  # fmt: skip
        self._serving.inc(1)
        try:
            reply = await self._inner(call)
        except BaseException as exc:
            self._serving.inc(-1)
            self.later(call, Seen.failed(exc))
            raise
        trace = call.ctx.trace
        total = trace.elapsed()
        overhead = max(0.0, total - trace.upstream_seconds)
        reply.headers[OVERHEAD_HEADER] = f"{overhead * 1000:.3f}"
        disclose = self._disclose
        if isinstance(reply, Completed):
            # The edge's loop when it told it (a system call fewer: core/call.py's `loop`).
            loop = trace.loop
            if loop is None:
                loop = asyncio.get_running_loop()
            if disclose is None:
                loop.call_soon(self._completed, call, reply, total)
                return reply
            seen = self._seen(call, reply, total)
            disclose.write(call, reply, self._price(call, seen) if self._price_first else None)
            loop.call_soon(self._whole, call, seen)
            return reply
        if disclose is not None:
            disclose.write(call, reply, None)
        return reply.watch(_Watching(self, call))

    async def _headers_only(self, call: Call) -> Reply:
        reply = await self._inner(call)
        if self._disclose is not None:
            bill = None
            if self._price_first and isinstance(reply, Completed):
                bill = self._price(call, self._seen(call, reply, 0.0))
            self._disclose.write(call, reply, bill)
        return reply

    def _completed(self, call: Call, reply: Completed, total: float) -> None:
        self._whole(call, self._seen(call, reply, total))

    def _whole(self, call: Call, seen: Seen) -> None:
        self._serving.inc(-1)
        self._finish(call, seen)

    def _seen(self, call: Call, reply: Completed, total: float) -> Seen:
        # Positional (outcome, status, error, usage, generated, answer, reply, ttft, inter_token,
        # consumer_seconds, total): keywords would be packed into a dict and unpacked by name.
        seen = Seen(OK, reply.status, None, None, [], None, reply, None, None, 0.0, total)
        cache = call.ctx.trace.cache
        # A cached answer's usage was not spent here: skip parsing it (its buckets are in the
        # cache's result; a shared one's is parsed already, and tells what coalescing saved).
        if cache is None or cache.outcome is not _HIT:
            seen.usage = reply.usage
            if seen.usage is None and reply.status == 200:
                seen.answer = reply.data
            if call.kind != "embedding" and reply.status == 200:  # parsed for its usage already
                seen.served = served_tier(reply.data)
        return seen

    def stream_ended(self, call: Call, seen: Seen) -> None:
        self._serving.inc(-1)
        self.later(call, seen)

    def later(self, call: Call, seen: Seen) -> None:
        """Build and emit the record on the next loop turn (now, if no loop runs any more)."""
        seen.total = call.ctx.trace.elapsed() if seen.total is None else seen.total
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._finish(call, seen)
            return
        loop.call_soon(self._finish, call, seen)


# A chat delta's text, as compact JSON writes it first. A chunk whose delta opens with non-empty
# text is what `has_generated_token` answers True for: `_Watching.each` judges it on the bytes,
# without parsing the event (most events of most streams; a parse and the walk cost ~12 calls
# an event). The key can only be a delta object's own: inside a JSON string every quote is
# escaped. Any other shape (other spacing, empty text, tool calls) goes to `_generated`.
_DELTA_TEXT = b'"delta":{"content":"'


def _generated(event: Event, data: bytes) -> bool:
    """Any other event: on the keys first, so most are judged without a parse (upstreams
    write JSON in every spacing: `"content": "` from Python servers). `find`, not `in`
    (core/reply.py's docstring): on every event of every stream."""
    return (
        data.find(b'"content"') >= 0 or data.find(b'"text"') >= 0
        or data.find(b'"tool_calls"') >= 0
        or data.find(b'.delta"') >= 0  # a Responses delta ("type":"response.output_text.delta")
    ) and has_generated_token(event.json())  # fmt: skip


class _Watching(Watcher):
    """A stream's record: TTFT at the first generated token (its hand-off time), the mean gap
    between later ones, usage, the tier that served it, the time the client held its events,
    and its outcome; built once it ended, whichever way."""

    __slots__ = ("_call", "_first", "_gaps", "_last", "_measure", "_seen")

    def __init__(self, measure: Measure, call: Call) -> None:
        self._measure, self._call = measure, call
        self._seen = Seen(outcome=CANCELLED, status=CLIENT_CLOSED)
        self._first: float | None = None
        self._last = 0.0
        self._gaps = 0

    def each(self, event: Event, handed: float) -> None:
        seen = self._seen
        if self._first is None:
            if has_generated_token(event.json()):
                self._first = self._last = handed
                seen.generated.append(event.data)
        elif (
            # A compact chat delta's text (`_DELTA_TEXT`), on the bytes
            (at := (data := event.data).find(_DELTA_TEXT)) >= 0 and data[at + 20 : at + 21] != b'"'
        ) or _generated(event, data):
            self._last = handed
            self._gaps += 1
            seen.generated.append(event.data)
        if seen.served is None and event.data.find(b'"service_tier"') >= 0:
            seen.served = served_tier(event.json())

    async def end(self, ended: Ended) -> None:
        seen, error = self._seen, ended.error
        if error is None:
            seen.outcome, seen.status = OK, 200
        else:
            failed = Seen.failed(error)
            seen.outcome, seen.error = failed.outcome, failed.error
            # Once an event went out the client has its 200; an error ends the stream in-band.
            sent = ended.sent
            seen.status = failed.status if failed.outcome == CANCELLED or not sent else 200
        seen.usage = ended.usage
        seen.consumer_seconds = ended.consumer_seconds
        if (first := self._first) is not None:
            seen.ttft = first - self._call.ctx.trace.started
            seen.inter_token = (self._last - first) / self._gaps if self._gaps else None
        self._measure.stream_ended(self._call, seen)
