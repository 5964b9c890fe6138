"""The exporter's queue and job (levergate/otel/exporter.py) against a real OTLP/HTTP receiver on
loopback: the queue's bound and its drops, a full batch sent at once, retries within the
timeout, a close that exports what is queued (an export the job's cancellation interrupted
included)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from prometheus_client import CollectorRegistry

from levergate.config import Settings
from levergate.core.spans import Internal, Spans, end
from levergate.otel.exporter import HELD, OtelMetrics, SpanExporter
from tests.unit.requestlog.records import record


class Receiver:
    """Every span posted to /v1/traces; `answers` are the statuses of the next POSTs (200 after
    them); `hold`, when set, keeps each POST waiting until it is set."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.posts = 0
        self.answers: list[int] = []
        self.hold: asyncio.Event | None = None
        self.got = asyncio.Event()
        self.headers: list[dict[str, str]] = []

    async def handle(self, request: web.Request) -> web.Response:
        self.posts += 1
        self.headers.append(dict(request.headers))
        body = await request.read()
        if self.hold is not None:
            await self.hold.wait()
        status = self.answers.pop(0) if self.answers else 200
        if status == 200:
            for resource in ExportTraceServiceRequest.FromString(body).resource_spans:
                for scope in resource.scope_spans:
                    self.spans.extend(scope.spans)
            self.got.set()
        return web.Response(status=status, content_type="application/x-protobuf")


@pytest.fixture
async def receiver() -> AsyncIterator[tuple[Receiver, str]]:
    found = Receiver()
    app = web.Application()
    app.router.add_post("/v1/traces", found.handle)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield found, f"http://127.0.0.1:{runner.addresses[0][1]}"
    await runner.cleanup()


def exporter(endpoint: str, **otel: Any) -> tuple[SpanExporter, Callable[[str], float]]:
    settings = Settings.load(
        upstreams=[{"name": "sim", "base_url": "http://127.0.0.1:1/v1"}],
        otel={"endpoint": endpoint, "headers": {"x-api-key": "k1"}, **otel},
    )
    registry = CollectorRegistry()
    found = SpanExporter(settings, metrics=OtelMetrics(registry), retry_first=0.01)

    def metric(reason: str) -> float:
        if reason == "exported":
            return registry.get_sample_value("levergate_otel_spans_exported_total") or 0.0
        labels = {"reason": reason}
        return registry.get_sample_value("levergate_otel_spans_dropped_total", labels) or 0.0

    return found, metric


def traced(n: int) -> Spans:
    """A request's trace context with one finished attempt: two spans."""
    spans = Spans(trace_id=1000 + n, span_id=2000 + n)
    attempt = spans.attempt("sim", "fast-1")
    assert attempt is not None
    end(attempt)
    return spans


async def test_the_queue_is_bounded_and_the_close_exports_what_it_holds(
    receiver: tuple[Receiver, str],
) -> None:
    got, endpoint = receiver
    spans, metric = exporter(endpoint, max_queue=5)
    for n in range(3):  # 2 spans each: the third does not fit
        spans.export(record(n), traced(n))
    spans.export(record(9), Spans(trace_id=1, span_id=2, sampled=False))  # not sampled: nothing
    assert metric("queue_full") == 2
    assert got.posts == 0  # nothing runs on the request path
    await spans.aclose()
    assert metric("exported") == 4
    assert sorted(s.trace_id for s in got.spans) == sorted(
        [(1000).to_bytes(16, "big")] * 2 + [(1001).to_bytes(16, "big")] * 2
    )
    assert got.headers[0]["Content-Type"] == "application/x-protobuf"
    assert got.headers[0]["x-api-key"] == "k1"
    spans.export(record(5), traced(5))  # after the close: dropped, counted
    assert metric("queue_full") == 4
    assert got.posts == 1


async def test_a_full_batch_is_exported_before_the_interval(
    receiver: tuple[Receiver, str],
) -> None:
    got, endpoint = receiver
    spans, metric = exporter(endpoint, max_queue=4, export_interval_seconds=600)
    job = asyncio.ensure_future(spans.run())
    try:
        spans.export(record(0), traced(0))
        await asyncio.sleep(0.05)
        assert got.posts == 0  # half a batch waits for the interval
        spans.export(record(1), traced(1))
        async with asyncio.timeout(10):
            await got.got.wait()
        assert len(got.spans) == 4
    finally:
        job.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await job
        await spans.aclose()
    assert metric("exported") == 4


async def test_a_refusal_that_may_pass_is_retried_and_one_that_cannot_is_dropped(
    receiver: tuple[Receiver, str],
) -> None:
    got, endpoint = receiver
    spans, metric = exporter(endpoint)
    got.answers = [503, 429]
    spans.export(record(0), traced(0))
    await spans.flush()
    assert (got.posts, metric("exported")) == (3, 2)
    got.answers = [400]
    spans.export(record(1), traced(1))
    await spans.flush()
    assert (got.posts, metric("exported"), metric("export_failed")) == (4, 2, 2)
    await spans.aclose()


async def test_a_collector_that_is_down_costs_bounded_time_and_counts_the_spans() -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # bound, not listening: connections are refused
        spans, metric = exporter(f"http://127.0.0.1:{port}", timeout_seconds=0.5)
        for n in range(3):
            spans.export(record(n), traced(n))
        internal = Internal("workflow w", 5, 6, None, 1.0, 2.0, {"levergate.workflow": "w"})
        spans.export_internal([internal], now=3.0)
        async with asyncio.timeout(10):
            await spans.flush()
            assert metric("export_failed") == 7
            spans.export(record(4), traced(4))
            await spans.aclose()
    assert metric("export_failed") == 9
    assert metric("exported") == 0


async def test_an_export_the_cancellation_interrupted_is_sent_at_the_close(
    receiver: tuple[Receiver, str],
) -> None:
    got, endpoint = receiver
    spans, metric = exporter(endpoint, max_queue=4, export_interval_seconds=600)
    got.hold = asyncio.Event()
    job = asyncio.ensure_future(spans.run())
    for n in range(2):
        spans.export(record(n), traced(n))
    async with asyncio.timeout(10):
        while got.posts == 0:
            await asyncio.sleep(0.01)
    job.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await job
    got.hold = None
    await spans.aclose()
    assert got.posts == 2
    assert len(got.spans) == 4
    assert metric("exported") == 4


async def test_a_traced_request_is_held_until_its_chunk_is_encoded_then_let_go(
    receiver: tuple[Receiver, str],
) -> None:
    """A request's record and trace context are held until `HELD` requests' spans are encoded
    together, then the queue holds only their bytes: a queued record kept its objects alive
    until the export, for the garbage collector to walk and move into its old generation (the
    exporter's docstring)."""
    got, endpoint = receiver
    spans, metric = exporter(endpoint)
    found, context = record(1), traced(1)
    held = sys.getrefcount(found), sys.getrefcount(context)
    spans.export(found, context)
    assert (sys.getrefcount(found), sys.getrefcount(context)) == (held[0] + 1, held[1] + 1)
    for n in range(2, HELD + 1):  # the chunk fills: every request's spans encoded
        spans.export(record(n), traced(n))
    assert (sys.getrefcount(found), sys.getrefcount(context)) == held
    internal = Internal("workflow w", 5, 6, None, 1.0, 2.0, {"levergate.workflow": "w"})
    internal_held = sys.getrefcount(internal)
    spans.export_internal([internal], now=3.0)
    assert sys.getrefcount(internal) == internal_held
    await spans.aclose()
    assert metric("exported") == 2 * HELD + 1
    names = Counter(s.name.split()[0] for s in got.spans)
    assert names == {"attempt": HELD, "chat": HELD, "workflow": 1}


async def test_the_close_exports_the_requests_still_held(receiver: tuple[Receiver, str]) -> None:
    got, endpoint = receiver
    spans, metric = exporter(endpoint)
    for n in range(3):  # fewer than a chunk: held, not encoded yet
        spans.export(record(n), traced(n))
    await spans.aclose()
    assert metric("exported") == 6
    assert len(got.spans) == 6


async def test_spans_that_cannot_be_encoded_are_that_requests_loss_alone(
    receiver: tuple[Receiver, str],
) -> None:
    got, endpoint = receiver
    spans, metric = exporter(endpoint)
    spans.export(record(1, request_id=None), traced(1))  # no id to write: refused encoded
    spans.export(record(2), traced(2))
    await spans.aclose()
    assert metric("invalid") == 1
    assert metric("exported") == 2
    assert {s.trace_id for s in got.spans} == {(1002).to_bytes(16, "big")}


async def test_a_batch_is_counted_in_spans_and_never_splits_a_request(
    receiver: tuple[Receiver, str],
) -> None:
    """A request's spans are one item of the queue (otel/spans.py joins them): a batch takes
    the requests whose spans fit in it, and the queue's bound and gauge count spans."""
    got, endpoint = receiver
    spans, metric = exporter(endpoint, max_queue=2048, export_interval_seconds=600)
    for n in range(513):  # 1,026 spans: a batch of 1,024 (512 requests), then one request
        spans.export(record(n), traced(n))
    workflow = Internal(name="w", trace_id=7, span_id=8, parent_id=None, started=0.0,
                        ended=1.0, attributes={})  # fmt: skip
    spans.export_internal([workflow], now=1.0)
    assert spans._spans == 1027
    assert metric("queue_full") == 0
    for n in range(511):  # 2 spans each: 1,021 fit in the bound, the rest are dropped
        spans.export(record(n), traced(n))
    assert spans._spans == 2047
    assert metric("queue_full") == 2
    await spans.aclose()
    assert metric("exported") == 2047
    assert got.posts == 2  # 1,024 spans, then 1,023
    assert len(got.spans) == 2047
