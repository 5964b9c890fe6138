"""`SpanExporter`: finished requests' spans to an OTLP/HTTP collector, in batches off the path.

`export` (the recorder's tracer) is called on the event loop after the answer went out (the
recorder's `finish` runs a loop turn later). It holds the request's record and trace context,
and every `HELD` requests writes their spans as OTLP `Span` bytes (otel/spans.py, otel/otlp.py)
and queues the bytes (`settle`; the job settles what is held before it sends); with the queue
full (`otel.max_queue` spans, the held counted: the request's and one per attempt) it holds
nothing and counts them dropped (`levergate_otel_spans_dropped_total{reason="queue_full"}`).
Encoded together the encoder's code stays in the CPU's caches: timed in place (`perf_counter`
in `otel_ab.py`'s gateway with the log on, 2026-12-05, a quiet AMD EPYC) a request's spans took
4.0 us encoded one at a time, 2.0 us 32 at a time. Through the proxy (`levergate serve` at
c=16, the log on, timed in place the same day) tracing's pieces took, a request: its context
begun 0.81 us (core/spans.py `begin`), its attempt's span id and `traceparent` 1.0 us, the hold
0.35 us, the encoding 2.1 us; a POST every 512 requests. On the wall clock through the proxy
(`benchmarks/results/trees_proxy_log_parts.md`, 10 rounds, paired CPU / off at c=16) tracing
alone was 1.083x of off, with the log 1.165x; this module's encoders (otel/spans.py, otlp.py)
mypyc-compiled with the log's row and features, 1.198x: compiled, the same calls into C cost more.

Why at once rather than by the job (as until 2026-12-04): a queued record kept its request's
objects alive (the record, its timings, tokens, trace context and attempts: ~10 objects the
garbage collector tracks, ~2,500 with 256 requests waiting for a batch), so the young
collections found them alive and moved them into the old generation, and every ~20,000 objects
moved there start a full collection, which walks the gateway's whole heap (~80,000 objects,
~15M instructions, 10-40 ms). Tracing had 1.25x the young collections of tracing off and
twice the full ones (0.2 against 0.1 per 1,000 whole requests; benchmarks/results/
otel_where.md), which callgrind's counts, taken with the start-up heap frozen, did not show.
Bytes are not tracked by the collector: the queue now costs it nothing (the same collections
as tracing off). Held `HELD` requests at most, a record and its context meet a young collection
now and then and are let go before an old one (as the request log's held records,
requestlog/writer.py: 231 -> 239 young collections over 8,600 requests, the collector's time
unchanged).

A supervised background job (`run`) wakes every `otel.export_interval_seconds` (or as soon as a
batch of 1,024 spans waits) and POSTs each batch as one `ExportTraceServiceRequest` (protobuf,
`<endpoint>/v1/traces`, the configured headers) over a kept-alive connection (levergate's
HTTP/1.1 client; aiohttp for an https:// collector). As the OpenTelemetry SDK's exporter does,
an export that fails on the way (no connection, a timeout, 429, 502, 503, 504) is tried again
after 1 s, 2 s, 4 s ... while it fits in `otel.timeout_seconds`; then, or on any other answer,
the batch is dropped and counted (`reason="export_failed"`): a collector that is down costs the
gateway a bounded queue and a retry now and then, never a request. Closing exports what is
queued (a batch whose POST the job's cancellation interrupted included), within
`otel.timeout_seconds`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from bisect import bisect_right
from collections.abc import Sequence
from itertools import accumulate
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge

from levergate.config import UpstreamSettings
from levergate.core.spans import Internal
from levergate.otel import otlp
from levergate.otel.spans import SCHEMA_URL, SpanEncoder
from levergate.upstreams.client import client_for
from levergate.upstreams.wire import HttpClient, TransportFailed
from levergate.version import __version__

if TYPE_CHECKING:
    from levergate.config import Settings
    from levergate.core.spans import Spans
    from levergate.layers.measure.record import RequestRecord

__all__ = ["OtelMetrics", "SpanExporter"]

log = logging.getLogger("levergate.otel")

# Spans per export at most: twice the SDK's batch processor's default (`SDK_BATCH_SPANS`), half
# the default queue (`otel.max_queue` 2,048). A POST of 512 spans was ~0.9M instructions, ~3,500
# a traced request, ~85% of it the same whatever the batch's size (the HTTP exchange and the
# event loop's turns; the spans' bytes joined and copied the rest): benchmarks/results/
# otelcut2.md. A collector takes 20 MiB a request by default; a batch is ~0.2 MiB.
BATCH_SPANS = 1024
# Requests whose spans are encoded together (`SpanExporter.export`): the encoder's code stays
# in the CPU's caches across them.
HELD = 32
SDK_BATCH_SPANS = 512
RETRY_FIRST_S = 1.0
RETRYABLE = frozenset({429, 502, 503, 504})  # as the SDK's OTLP/HTTP exporter


def _base_ns() -> int:
    """The wall clock (Unix ns) when `time.perf_counter()` read 0."""
    return time.time_ns() - int(time.perf_counter() * 1e9)


class OtelMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.exported = Counter(
            "levergate_otel_spans_exported", "Spans the collector accepted.", registry=registry
        )
        self.dropped = Counter(
            "levergate_otel_spans_dropped",
            "Spans not exported: queue_full (the queue was full), export_failed (the collector "
            "did not take them in time), invalid (could not be encoded).",
            ("reason",),
            registry=registry,
        )
        self.queued = Gauge("levergate_otel_spans_queued", "Spans waiting for export.",
                            registry=registry)  # fmt: skip


class SpanExporter:
    def __init__(
        self, settings: Settings, *, metrics: OtelMetrics, retry_first: float = RETRY_FIRST_S
    ) -> None:
        """`retry_first`: seconds before the first retry of an export (doubling after)."""
        otel = settings.otel
        if otel.endpoint is None:
            raise ValueError("tracing needs otel.endpoint")
        self._encoder = SpanEncoder(settings)
        self._url = otel.endpoint.rstrip("/") + "/v1/traces"
        self._headers = {
            "Content-Type": "application/x-protobuf",
            "User-Agent": f"levergate/{__version__}",
            **{k: v.get_secret_value() for k, v in otel.headers.items()},
        }
        self._interval = otel.export_interval_seconds
        self._timeout = otel.timeout_seconds
        self._retry_first = retry_first
        self._m = metrics
        # Requests' spans encoded, waiting for a batch: an item a request (its span and its
        # attempts' in one `bytes`: one join where a `bytes` a span was a join and a list
        # more, ~480 instructions a request on the path, otel_pieces.py), its spans' count
        # beside it, and their sum.
        self._queue: list[bytes] = []
        self._counts: list[int] = []
        # Requests held for their spans to be encoded together (`export`, `settle`), counted
        # in `_spans` already.
        self._held: list[tuple[RequestRecord, Spans, int]] = []
        self._spans = 0
        self._max = otel.max_queue
        # Half the queue at most (512, the SDK's default, kept below 2,048): a batch's wake-up
        # leaves room for the spans that arrive while it is sent.
        self._batch = min(BATCH_SPANS, max(SDK_BATCH_SPANS, otel.max_queue // 2), otel.max_queue)
        # The batch being exported: survives the job's cancellation, for the close.
        self._sending: list[bytes] = []
        self._sending_spans = 0
        # The wall clock (Unix ns) when `time.perf_counter()` read 0: the spans' times are
        # perf_counter's. Read again at each of the job's wakes (the wall clock may be set).
        self._base_ns = _base_ns()
        self._wake = asyncio.Event()
        # levergate's own HTTP/1.1 keep-alive client for an http:// collector (aiohttp's POST of
        # a batch cost ~1.6M instructions, most of it its request and response machinery),
        # aiohttp for https:// (upstreams/client.py: `client_for`).
        self._collector = UpstreamSettings(name="otel-collector", base_url=otel.endpoint,
                                           http2="off")  # fmt: skip
        self._client: HttpClient | None = None
        self._closed = False
        self._warned = False
        metrics.queued.set_function(lambda: self._spans + self._sending_spans)

    # ---- the request path (the recorder's `Tracer`) -------------------------------------------

    def export(self, record: RequestRecord, spans: Spans) -> None:
        if not spans.sampled:
            return
        count = 1 + len(spans.attempts)
        queued = self._spans + count
        if queued > self._max:
            self._m.dropped.labels("queue_full").inc(count)
            return
        held = self._held
        held.append((record, spans, count))
        self._spans = queued
        if len(held) >= HELD:
            self.settle()
        if queued >= self._batch:  # the job settles what is held before it sends
            self._wake.set()

    def settle(self) -> None:
        """The held requests' spans encoded into the queue (`export`); a request whose spans
        cannot be encoded is its loss alone, counted (`invalid`)."""
        encode, base_ns = self._encoder.request, self._base_ns
        queue, counts = self._queue, self._counts
        for record, spans, count in self._held:
            try:
                queue.append(encode(record, spans, base_ns))
            except Exception:
                log.exception("otel: spans of one request not exported")
                self._m.dropped.labels("invalid").inc()
                self._spans -= count
                continue
            counts.append(count)
        self._held.clear()

    def export_internal(self, spans: Sequence[Internal], *, now: float) -> None:
        """Spans of levergate's own work, times on the clock that reads `now`."""
        if self._spans + len(spans) > self._max:
            self._m.dropped.labels("queue_full").inc(len(spans))
            return
        now_ns = time.time_ns()

        def wall(at: float) -> int:
            return now_ns - int((now - at) * 1e9)

        try:
            found = [self._encoder.internal(span, wall) for span in spans]
        except Exception:
            log.exception("otel: spans of levergate's own work not exported")
            self._m.dropped.labels("invalid").inc()
            return
        self._queue += found
        self._counts += [1] * len(found)
        self._spans += len(found)
        if self._spans >= self._batch:
            self._wake.set()

    # ---- the background job ------------------------------------------------------------------

    async def run(self) -> None:
        """Export a batch as soon as one is full, and what is queued every
        `export_interval_seconds` (one batch a wake: requests that arrive meanwhile wait for
        theirs, so a busy gateway sends full batches, not one per loop turn)."""
        due = time.monotonic() + self._interval
        while True:
            if self._spans < self._batch:
                try:
                    async with asyncio.timeout(max(0.0, due - time.monotonic())):
                        await self._wake.wait()
                except TimeoutError:
                    pass
                self._wake.clear()
            self._base_ns = _base_ns()
            late = time.monotonic() >= due
            if late or self._spans >= self._batch:
                # With a full batch queued at the top the job did not wait: the wake-up that
                # batch set is this one, not a reason to wake again after it.
                self._wake.clear()
                self.settle()
                if self._queue or self._sending:
                    await self._send(None)
            if late:
                due = time.monotonic() + self._interval

    async def flush(self, *, deadline: float | None = None) -> None:
        """Export everything queued, batch by batch; each export's retries end at `deadline`
        (`time.monotonic()`) when given, else `timeout_seconds` after it started."""
        self.settle()
        while self._queue or self._sending:
            await self._send(deadline)

    async def _send(self, deadline: float | None) -> None:
        """POST a batch (the one a cancellation interrupted, else the queue's first spans) as
        one request, retrying what may pass later until `deadline`; the batch is let go once
        it was exported or given up on."""
        if not self._sending:
            # The first requests whose spans fit in a batch (the first request at least).
            counts = self._counts
            taken = bisect_right(list(accumulate(counts[: self._batch])), self._batch) or 1
            self._sending = self._queue[:taken]
            self._sending_spans = count = sum(counts[:taken])
            del self._queue[:taken], counts[:taken]
            self._spans -= count
        encoder, spans, count = self._encoder, self._sending, self._sending_spans
        body = otlp.export_request(encoder.resource, encoder.scope, SCHEMA_URL, spans)
        started = time.monotonic()
        end = started + self._timeout if deadline is None else deadline
        wait = self._retry_first
        while True:
            problem = await self._post(body, end - time.monotonic())
            if problem is None:
                self._m.exported.inc(count)
                self._warned = False
                break
            retry, why = problem
            if not retry or time.monotonic() + wait >= end:
                self._m.dropped.labels("export_failed").inc(count)
                if not self._warned:
                    self._warned = True
                    log.warning("otel: %d spans not exported to %s: %s", count, self._url,
                                why)  # fmt: skip
                break
            await asyncio.sleep(wait)
            wait *= 2
        self._sending = []
        self._sending_spans = 0

    async def _post(self, body: bytes, seconds: float) -> tuple[bool, str] | None:
        """None when the collector took `body`, else (whether to retry, why not)."""
        if seconds <= 0:
            return False, "out of time"
        if self._client is None:  # made on the loop that uses it
            self._client = client_for(self._collector)
        try:
            async with asyncio.timeout(seconds):
                answer = await self._client.request("POST", self._url, body=body,
                                                    headers=self._headers)  # fmt: skip
                try:
                    await answer.read()
                finally:  # a read cut short closes the connection (read to the end: pooled)
                    await answer.aclose()
        except (TransportFailed, TimeoutError) as exc:
            return True, f"{type(exc).__name__}: {exc}"
        if 200 <= answer.status < 300:
            return None
        return answer.status in RETRYABLE, f"HTTP {answer.status}"

    async def aclose(self) -> None:
        """Export what is queued within `timeout_seconds` (the job was cancelled before), count
        what was not as dropped, and close; again: a no-op. Spans exported after the close are
        dropped as the queue's."""
        if self._closed:
            return
        self._closed = True
        try:
            await self.flush(deadline=time.monotonic() + self._timeout)
        finally:
            if lost := self._spans + self._sending_spans:
                self._m.dropped.labels("export_failed").inc(lost)
            self._queue.clear()
            self._counts.clear()
            self._spans = 0
            self._sending = []
            self._sending_spans = 0
            self._max = 0
            if self._client is not None:
                await self._client.aclose()
