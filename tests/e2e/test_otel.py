"""OpenTelemetry traces (issue 23 §4): a gateway with `otel.endpoint` exports one span per
request (GenAI semantic conventions) and a child per upstream attempt to a local OTLP/HTTP
receiver this test runs, decoded with opentelemetry-proto; the client's `traceparent` is
continued and each attempt's is sent upstream."""

from __future__ import annotations

import asyncio
import gzip
import socket
from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
import pytest
from aiohttp import web
from openai.types.chat import ChatCompletionMessageParam
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from levergate.app import build_gateway
from levergate.config import Settings
from levergate.server.run import serving
from tests.e2e.test_bench_http import FakeOpenAI, serve

CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"


class Receiver:
    """An OTLP/HTTP trace receiver: every span it was sent."""

    def __init__(self) -> None:
        self.spans: list[Span] = []

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        if request.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        message = ExportTraceServiceRequest.FromString(body)
        for resource in message.resource_spans:
            for scope in resource.scope_spans:
                self.spans.extend(scope.spans)
        return web.Response(content_type="application/x-protobuf")


@pytest.fixture
async def receiver() -> AsyncIterator[tuple[Receiver, str]]:
    found = Receiver()
    app = web.Application()
    app.router.add_post("/v1/traces", found.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield found, f"http://127.0.0.1:{runner.addresses[0][1]}"
    await runner.cleanup()


def attrs(span: Span) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for kv in span.attributes:
        value = kv.value
        kind = value.WhichOneof("value")
        if kind == "array_value":
            found[kv.key] = [v.string_value for v in value.array_value.values]
        else:
            found[kv.key] = getattr(value, kind)
    return found


def _the_whole_answer_continues_the_clients_trace(
    first: Span, attempts: list[Span], sent: list[str]
) -> None:
    assert first.trace_id.hex() == CLIENT_TRACE
    assert first.parent_span_id.hex() == CLIENT_SPAN
    assert first.name == "chat small"
    a = attrs(first)
    assert a["gen_ai.operation.name"] == "chat"
    assert a["gen_ai.provider.name"] == "openai"
    assert a["gen_ai.request.model"] == "small"
    assert a["gen_ai.response.model"] == "m-1"
    assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) == (11, 3)
    assert a["gen_ai.usage.cache_read.input_tokens"] == 4
    assert a["gen_ai.usage.cache_creation.input_tokens"] == 0
    assert a["levergate.attempts"] == 1
    assert a["levergate.retries"] == 0
    assert a["levergate.cost_usd"] >= 0
    assert "error.type" not in a
    assert "gen_ai.response.time_to_first_chunk" not in a  # a whole answer

    # Each attempt is a child of its request, with the span id sent upstream as traceparent.
    for span in attempts:
        assert f"00-{span.trace_id.hex()}-{span.span_id.hex()}-01" in sent
    child = next(s for s in attempts if s.parent_span_id == first.span_id)
    assert child.trace_id == first.trace_id
    assert attrs(child)["gen_ai.request.model"] == "m-1"
    assert first.start_time_unix_nano <= child.start_time_unix_nano
    assert child.end_time_unix_nano <= first.end_time_unix_nano


async def test_spans_follow_the_genai_conventions_and_continue_the_clients_trace(
    receiver: tuple[Receiver, str],
) -> None:
    got, collector = receiver
    fake = FakeOpenAI(tokens=3)
    runner, upstream = await serve(fake)
    settings = Settings.load(
        server={"port": 0},
        traffic={"retry": {"enabled": False}},
        upstreams=[{"name": "up", "base_url": upstream + "/v1"},
                   {"name": "broken", "base_url": upstream + "/status-500/v1"}],
        models=[{"name": "small", "upstream": "up", "upstream_model": "m-1"},
                {"name": "bad", "upstream": "broken"}],
        otel={"endpoint": collector, "export_interval_seconds": 0.05},
    )  # fmt: skip
    chat = {"model": "small", "messages": [{"role": "user", "content": "hi"}]}
    parent = {"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01", "tracestate": "congo=t61"}
    try:
        async with (
            build_gateway(settings) as gw,
            serving(gw) as url,
            httpx.AsyncClient(base_url=url, timeout=30) as http,
        ):
            whole = await http.post("/chat/completions", json=chat, headers=parent)
            streamed = await http.post("/chat/completions", json={**chat, "stream": True})
            failed = await http.post("/chat/completions", json={**chat, "model": "bad"})
    finally:
        await runner.cleanup()  # the gateway closed first: its exporter flushed every span
    assert (whole.status_code, streamed.status_code, failed.status_code) == (200, 200, 502)
    servers = {
        attrs(s)["levergate.request_id"]: s for s in got.spans if s.kind == Span.SPAN_KIND_SERVER
    }
    attempts = [s for s in got.spans if s.kind == Span.SPAN_KIND_CLIENT]
    assert len(servers) == 3
    assert len(attempts) == 3

    went = [{k.lower(): v for k, v in h.items()} for h in fake.headers]
    sent = [h["traceparent"] for h in went]
    # The client's tracestate went up with its trace alone (W3C), not with a trace of ours.
    ours = [h.get("tracestate") for h in went if CLIENT_TRACE in h["traceparent"]]
    assert ours == ["congo=t61"]
    assert all("tracestate" not in h for h in went if CLIENT_TRACE not in h["traceparent"])
    _the_whole_answer_continues_the_clients_trace(
        servers[whole.headers["x-request-id"]], attempts, sent
    )

    second = servers[streamed.headers["x-request-id"]]
    assert second.trace_id.hex() != CLIENT_TRACE  # a new trace, and its id went upstream
    assert not second.parent_span_id
    assert attrs(second)["gen_ai.response.time_to_first_chunk"] > 0
    assert any(h.startswith(f"00-{second.trace_id.hex()}-") for h in sent)

    third = servers[failed.headers["x-request-id"]]
    assert attrs(third)["error.type"]
    assert third.status.code == third.status.STATUS_CODE_ERROR
    broken = next(s for s in attempts if s.parent_span_id == third.span_id)
    assert attrs(broken)["error.type"]
    assert attrs(broken)["levergate.upstream"] == "broken"


async def test_the_openai_sdk_traced_whole_and_streamed_continues_its_trace(
    receiver: tuple[Receiver, str],
) -> None:
    """The official OpenAI SDK as the client, its `traceparent` and `tracestate` sent as extra
    headers: both answers arrive whole, and the upstream gets the client's trace with an
    attempt's span, and its `tracestate`."""
    got, collector = receiver
    fake = FakeOpenAI(tokens=3)
    runner, upstream = await serve(fake)
    settings = Settings.load(
        server={"port": 0},
        upstreams=[{"name": "up", "base_url": upstream + "/v1"}],
        models=[{"name": "small", "upstream": "up", "upstream_model": "m-1"}],
        otel={"endpoint": collector, "export_interval_seconds": 0.05},
    )
    parent = {"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01", "tracestate": "rojo=00f067"}
    hi: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]
    try:
        async with build_gateway(settings) as gw, serving(gw) as url:
            client = openai.AsyncOpenAI(base_url=url, api_key="unused", max_retries=0)
            whole = await client.chat.completions.create(
                model="small",
                messages=hi,
                extra_headers=parent,
            )
            stream = await client.chat.completions.create(
                model="small",
                messages=hi,
                stream=True,
                extra_headers=parent,
            )
            chunks = [chunk async for chunk in stream]
            await client.close()
    finally:
        await runner.cleanup()
    assert whole.choices[0].message.content
    assert any(c.choices and c.choices[0].delta.content for c in chunks)
    servers = [s for s in got.spans if s.kind == Span.SPAN_KIND_SERVER]
    attempts = [s for s in got.spans if s.kind == Span.SPAN_KIND_CLIENT]
    assert len(servers) == 2
    assert len(attempts) == 2
    assert {s.trace_id.hex() for s in got.spans} == {CLIENT_TRACE}
    assert all(s.parent_span_id.hex() == CLIENT_SPAN for s in servers)
    went = [{k.lower(): v for k, v in h.items()} for h in fake.headers]
    sent = [h["traceparent"] for h in went]
    assert sorted(sent) == sorted(f"00-{CLIENT_TRACE}-{a.span_id.hex()}-01" for a in attempts)
    assert [h.get("tracestate") for h in went] == ["rojo=00f067"] * 2  # W3C: passed on with it


async def test_a_workflow_is_one_trace_its_calls_under_its_steps(
    receiver: tuple[Receiver, str],
) -> None:
    """A traced workflow: its own span, a span per step under it, and each step's requests
    under that step's span, all in one trace, with the critical path on the workflow's span."""
    got, collector = receiver
    runner, upstream = await serve(FakeOpenAI(tokens=2))
    settings = Settings.load(
        upstreams=[{"name": "up", "base_url": upstream + "/v1"}],
        models=[{"name": "small", "upstream": "up", "upstream_model": "m-1"}],
        otel={"endpoint": collector, "export_interval_seconds": 0.05},
    )
    hi = [{"role": "user", "content": "hi"}]
    try:
        async with build_gateway(settings) as gw, gw.workflow("rag-otel") as wf:
            await wf.gather(
                ("retrieve", lambda c: gw.chat(model="small", messages=hi, controls=c)),
                ("hints", lambda c: gw.chat(model="small", messages=hi, controls=c)),
            )
            await wf.run("answer", lambda c: gw.chat(model="small", messages=hi, controls=c))
    finally:
        await runner.cleanup()
    internal = [s for s in got.spans if s.kind == Span.SPAN_KIND_INTERNAL]
    [root] = [s for s in internal if s.name == "workflow rag-otel"]
    steps = {attrs(s)["levergate.step"]: s for s in internal if s is not root}
    requests = [s for s in got.spans if s.kind == Span.SPAN_KIND_SERVER]
    assert sorted(steps) == ["answer", "hints", "retrieve"]
    assert len(requests) == 3
    assert {s.trace_id for s in got.spans} == {root.trace_id}  # attempts included
    assert all(s.parent_span_id == root.span_id for s in steps.values())
    for request in requests:
        a = attrs(request)
        assert a["levergate.workflow"] == "rag-otel"
        assert request.parent_span_id == steps[a["levergate.feature"]].span_id
    assert attrs(root)["levergate.workflow.critical_path"][-1] == "answer"
    assert attrs(root)["levergate.workflow.steps"] == 3


async def test_a_collector_that_is_down_costs_no_answer() -> None:
    """Every request is answered while the collector refuses connections; its spans are
    dropped and counted once each export's time is up, and the close takes bounded time."""
    runner, upstream = await serve(FakeOpenAI(tokens=2))
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        settings = Settings.load(
            server={"port": 0},
            upstreams=[{"name": "up", "base_url": upstream + "/v1"}],
            models=[{"name": "small", "upstream": "up", "upstream_model": "m-1"}],
            otel={"endpoint": f"http://127.0.0.1:{closed.getsockname()[1]}",
                  "export_interval_seconds": 0.05, "timeout_seconds": 0.5},
        )  # fmt: skip
        chat = {"model": "small", "messages": [{"role": "user", "content": "hi"}]}
        try:
            async with (
                build_gateway(settings) as gw,
                serving(gw) as url,
                httpx.AsyncClient(base_url=url, timeout=30) as http,
            ):
                answers = [await http.post("/chat/completions", json=chat) for _ in range(5)]
                await asyncio.sleep(0.2)  # exports tried, and failed, meanwhile
        finally:
            await runner.cleanup()
    assert [a.status_code for a in answers] == [200] * 5
    registry = gw.recorder.telemetry.registry
    dropped = registry.get_sample_value("levergate_otel_spans_dropped_total",
                                        {"reason": "export_failed"})  # fmt: skip
    assert dropped == 10  # each request's span and its attempt's
    assert not registry.get_sample_value("levergate_otel_spans_exported_total")
