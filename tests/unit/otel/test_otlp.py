"""The hand-written OTLP encoder (levergate/otel/otlp.py, otel/spans.py) decoded with
opentelemetry-proto's own classes: every field a collector reads, as the OTLP trace protocol
and the GenAI semantic conventions say it."""

from __future__ import annotations

import time
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ScopeSpans, Span, Status

from levergate.config import Settings
from levergate.core.controls import Priority
from levergate.core.spans import ENDED, SPAN, STARTED, Internal, Spans, span_id
from levergate.layers.measure.record import RequestRecord
from levergate.otel import otlp
from levergate.otel.spans import (
    _KEPT,
    _LEVERS,
    _OWN,
    _QUEUED,
    _SHARED,
    SCHEMA_URL,
    SpanEncoder,
    attributes,
)  # fmt: skip
from levergate.version import __version__
from tests.unit.requestlog.records import record, rich_record

T0 = 1_700_000_000_000_000_000  # the wall clock at perf_counter() == 0, in ns


def wall(perf: float) -> int:
    return T0 + int(perf * 1e9)


def value_of(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    assert kind is not None
    if kind == "array_value":
        return [value_of(v) for v in value.array_value.values]
    return getattr(value, kind)


def attrs(found: Any) -> dict[str, Any]:
    return {kv.key: value_of(kv.value) for kv in found}


def decoded(
    encoder: SpanEncoder, spans: bytes | list[bytes]
) -> tuple[ExportTraceServiceRequest, list[Span]]:
    """`spans`: one request's (`SpanEncoder.request`: its spans in one `bytes`), or a list."""
    listed = [spans] if isinstance(spans, bytes) else spans
    body = otlp.export_request(encoder.resource, encoder.scope, SCHEMA_URL, listed)
    message = ExportTraceServiceRequest.FromString(body)
    [resource] = message.resource_spans
    [scope] = resource.scope_spans
    return message, list(scope.spans)


def settings() -> Settings:
    return Settings.load(
        upstreams=[{"name": "sim", "base_url": "http://127.0.0.1:1/v1"},
                   {"name": "claude", "kind": "anthropic", "base_url": "http://127.0.0.1:2"}],
        otel={"endpoint": "http://127.0.0.1:3", "service_name": "gw-test"},
    )  # fmt: skip


def test_a_request_and_its_attempts_decode_as_the_spec_says() -> None:
    encoder = SpanEncoder(settings())
    traced = Spans(trace_id=0x4BF92F3577B34DA6A3CE929D0E0E4736, span_id=0x00F067AA0BA902B8,
                   parent_id=0x00F067AA0BA902B7, started=10.0)  # fmt: skip
    first = traced.attempt("claude", "claude-x")
    second = traced.attempt("sim", "fast-1")
    assert first is not None
    assert second is not None
    first[STARTED:] = 10.001, 10.002, "TransportFailed"
    second[STARTED] = 10.003  # still open when the request ended: it ends with the request
    rich = rich_record()._replace(upstream="sim", timings=rich_record().timings._replace(total=0.5))
    message, spans = decoded(encoder, encoder.request(rich, traced, T0))

    [resource] = message.resource_spans
    assert attrs(resource.resource.attributes) == {
        "service.name": "gw-test", "telemetry.sdk.language": "python",
        "telemetry.sdk.name": "levergate", "telemetry.sdk.version": __version__,
    }  # fmt: skip
    [scope] = resource.scope_spans
    assert scope.scope.name == "levergate"
    assert scope.schema_url == "https://opentelemetry.io/schemas/1.40.0"

    server, failed, open_ = spans
    assert server.trace_id.hex() == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert server.span_id.hex() == "00f067aa0ba902b8"
    assert server.parent_span_id.hex() == "00f067aa0ba902b7"
    assert server.name == "chat fast"
    assert server.kind == Span.SPAN_KIND_SERVER
    assert server.start_time_unix_nano == wall(10.0)
    assert server.end_time_unix_nano == wall(10.0) + 500_000_000
    assert attrs(server.attributes) == attributes(rich, "openai")
    assert server.status.code == Status.STATUS_CODE_UNSET  # rich_record() answered
    assert server.flags == 0x301  # sampled; the parent known to be remote
    assert not server.events
    assert not server.links

    assert [s.kind for s in (failed, open_)] == [Span.SPAN_KIND_CLIENT] * 2
    assert {s.trace_id for s in spans} == {server.trace_id}
    assert failed.parent_span_id == open_.parent_span_id == server.span_id
    assert failed.span_id == first[SPAN]
    assert failed.name == "attempt claude"
    assert (failed.start_time_unix_nano, failed.end_time_unix_nano) == (wall(10.001),
                                                                        wall(10.002))  # fmt: skip
    assert attrs(failed.attributes) == {
        "gen_ai.provider.name": "anthropic", "gen_ai.request.model": "claude-x",
        "levergate.upstream": "claude", "error.type": "TransportFailed",
    }  # fmt: skip
    assert failed.status.code == Status.STATUS_CODE_ERROR
    assert failed.status.message == "TransportFailed"
    assert failed.flags == 0x101  # sampled; the parent (the request's span) is local
    assert open_.end_time_unix_nano == server.end_time_unix_nano
    assert "error.type" not in attrs(open_.attributes)
    assert attrs(open_.attributes)["gen_ai.provider.name"] == "openai"


def test_a_failed_request_is_an_error_span_of_a_new_trace() -> None:
    encoder = SpanEncoder(settings())
    traced = Spans(trace_id=7, span_id=8, started=1.0)
    failed = record(5)  # rate_limited
    [span] = decoded(encoder, encoder.request(failed, traced, T0))[1]
    assert not span.parent_span_id
    assert span.trace_id == (7).to_bytes(16, "big")
    assert span.status.code == Status.STATUS_CODE_ERROR
    assert span.status.message == "RateLimited"
    a = attrs(span.attributes)
    assert a["error.type"] == "RateLimited"
    assert a["levergate.status"] == 429
    assert a["gen_ai.response.time_to_first_chunk"] == 0.005  # a stream's
    assert a == attributes(failed, "openai")


def test_internal_spans_keep_their_ids_and_move_to_the_wall_clock() -> None:
    encoder = SpanEncoder(settings())
    step = Internal("step plan", 11, 12, 13, started=100.0, ended=100.25,
                    attributes={"levergate.step": "plan", "levergate.workflow.steps": 3,
                                "levergate.workflow.critical_path": ["a", "b"]},
                    error="ValueError")  # fmt: skip
    now_ns = time.time_ns()

    def on_clock(at: float) -> int:
        return now_ns - int((101.0 - at) * 1e9)

    [span] = decoded(encoder, [encoder.internal(step, on_clock)])[1]
    assert (span.trace_id, span.span_id, span.parent_span_id) == (
        (11).to_bytes(16, "big"),
        (12).to_bytes(8, "big"),
        (13).to_bytes(8, "big"),
    )
    assert span.kind == Span.SPAN_KIND_INTERNAL
    assert span.end_time_unix_nano - span.start_time_unix_nano == 250_000_000
    assert span.end_time_unix_nano == now_ns - 750_000_000
    assert attrs(span.attributes) == {"levergate.step": "plan", "levergate.workflow.steps": 3,
                                      "levergate.workflow.critical_path": ["a", "b"],
                                      "error.type": "ValueError"}  # fmt: skip
    assert span.status.code == Status.STATUS_CODE_ERROR


def test_many_spans_and_long_values_take_multi_byte_lengths() -> None:
    encoder = SpanEncoder(settings())
    long = record(1)._replace(feature="f" * 70_000, request_id="r" * 300)
    traced = Spans(trace_id=1, span_id=2, started=0.0)
    attempt = traced.attempt("sim", "m" * 20_000)  # an attempt's span of 3-byte length too
    assert attempt is not None
    spans = [encoder.request(long, traced, T0) for _ in range(300)]
    decoded_spans = decoded(encoder, spans)[1]
    assert len(decoded_spans) == 600
    assert attrs(decoded_spans[-2].attributes)["levergate.feature"] == "f" * 70_000
    assert attrs(decoded_spans[-1].attributes)["gen_ai.request.model"] == "m" * 20_000
    assert decoded_spans[-1].parent_span_id == (2).to_bytes(8, "big")
    assert decoded_spans[-1].span_id == attempt[SPAN]


scalars = (
    st.text(max_size=300)
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False)
)
values = (
    scalars
    | st.lists(st.text(max_size=40), max_size=20)
    | st.lists(st.integers(min_value=-(2**63), max_value=2**63 - 1), max_size=20)
)


@given(st.dictionaries(st.text(max_size=60), values, max_size=12))
def test_any_attribute_round_trips(found: dict[str, Any]) -> None:
    writer = otlp.AttributeWriter(b"\x4a")
    encoded = otlp.span(trace_id=1, span_id=2, parent_id=None, name="n", kind=1, start_ns=0,
                        end_ns=1, attributes=writer.write(found))  # fmt: skip
    [span] = ScopeSpans.FromString(encoded).spans  # `span` writes a field of ScopeSpans
    assert attrs(span.attributes) == found
    assert [kv.key for kv in span.attributes] == list(found)


def test_none_is_left_out_and_other_types_are_refused() -> None:
    writer = otlp.AttributeWriter(b"\x0a")
    assert writer.write({"a": None}) == b""
    kv = KeyValue.FromString(writer.write({"b": 1})[2:])  # past the field's tag and length
    assert (kv.key, kv.value.int_value) == ("b", 1)
    with pytest.raises(TypeError, match="not object"):
        writer.write({"c": object()})


@given(st.integers(min_value=-(2**63), max_value=2**64 - 1))
def test_varint_is_protobufs(n: int) -> None:
    """int64 (negative: two's complement in ten bytes) and uint32 fields parse back."""
    signed = n - 2**64 if n >= 2**63 else n
    assert AnyValue.FromString(b"\x18" + otlp.varint(n)).int_value == signed
    span = Span.FromString(b"\x50" + otlp.varint(n % 2**32))  # dropped_attributes_count
    assert span.dropped_attributes_count == n % 2**32


def test_the_bytes_are_what_the_sdks_encoder_writes_for_the_same_spans() -> None:
    """The reference: the OpenTelemetry SDK's own OTLP encoder (the exporter levergate used
    before), given the same spans as SDK spans, writes the same messages."""
    # The SDK is in the test lock (the comparison's reference): imported, never skipped.
    from opentelemetry import trace as api
    from opentelemetry.exporter.otlp.proto.common import trace_encoder as encoder_module
    from opentelemetry.sdk import trace as sdk_trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

    encoder = SpanEncoder(settings())
    traced = Spans(trace_id=0xABC, span_id=0xDEF, parent_id=0x123, started=5.0)
    attempt = traced.attempt("sim", "fast-1")
    assert attempt is not None
    attempt[STARTED:] = 5.001, 5.002, "TransportFailed"
    failed = record(5)
    ours = decoded(encoder, encoder.request(failed, traced, T0))[0]

    resource = Resource({kv.key: value_of(kv.value)
                         for kv in ours.resource_spans[0].resource.attributes})  # fmt: skip
    scope = InstrumentationScope("levergate", schema_url=SCHEMA_URL)
    sampled = api.TraceFlags(api.TraceFlags.SAMPLED)
    client = api.SpanContext(0xABC, 0x123, is_remote=True, trace_flags=sampled)
    request = api.SpanContext(0xABC, 0xDEF, is_remote=False, trace_flags=sampled)
    error = api.Status(api.StatusCode.ERROR, "RateLimited")
    theirs = encoder_module.encode_spans([
        sdk_trace.ReadableSpan(
            "chat fast", context=request, parent=client, resource=resource,
            attributes=attributes(failed, "openai"), kind=api.SpanKind.SERVER, status=error,
            start_time=wall(5.0), end_time=wall(5.0) + int(failed.timings.total * 1e9),
            instrumentation_scope=scope),
        sdk_trace.ReadableSpan(
            "attempt sim", parent=request, resource=resource, kind=api.SpanKind.CLIENT,
            context=api.SpanContext(0xABC, span_id(attempt), is_remote=False,
                                    trace_flags=sampled),
            attributes={"gen_ai.provider.name": "openai", "gen_ai.request.model": "fast-1",
                        "levergate.upstream": "sim", "error.type": "TransportFailed"},
            status=api.Status(api.StatusCode.ERROR, "TransportFailed"),
            start_time=wall(5.001), end_time=wall(5.002), instrumentation_scope=scope),
    ])  # fmt: skip
    # Attributes compared as sets: levergate writes the repeating ones first.
    for message in (ours, theirs):
        for span in message.resource_spans[0].scope_spans[0].spans:
            ordered = sorted(span.attributes, key=lambda kv: kv.key)
            del span.attributes[:]
            span.attributes.extend(ordered)
    # Span.flags: the SDK sets the parent's remoteness only; its low byte is the W3C trace
    # flags (trace.proto), sampled for every span levergate exports.
    for span in ours.resource_spans[0].scope_spans[0].spans:
        assert span.flags & otlp.SAMPLED
        span.flags &= ~otlp.SAMPLED
    assert ours == theirs


SHARED = {  # a shared field of the record -> values it takes (few: kept blocks are reused)
    "kind": st.sampled_from(["chat", "completion", "embedding"]),
    "model": st.sampled_from(["fast", "auto"]),
    "feature": st.sampled_from(["f0", "f1"]),
    "status": st.sampled_from([200, 429]),
    "attempts": st.integers(1, 2),
    "retries": st.integers(0, 1),
    "tier": st.sampled_from(["standard", "flex"]),
    "priority": st.sampled_from(list(Priority)),
    "origin": st.sampled_from(["request", "batch"]),
    "upstream_model": st.sampled_from(["fast-1", ""]),
    "alias": st.sampled_from(["fast", ""]),
    "tenant": st.sampled_from([None, "t1"]),
    "upstream": st.sampled_from(["sim", "claude"]),
    "fallback": st.sampled_from([None, "slow"]),
    "workflow": st.sampled_from([None, "w"]),
}
ATTEMPTS = st.lists(st.tuples(st.sampled_from(["sim", "claude"]), st.sampled_from(["m", "n"]),
                              st.sampled_from([None, "TransportFailed"])), max_size=2)  # fmt: skip


CHANGES = st.dictionaries(st.sampled_from(sorted(SHARED)), st.just(None), max_size=2).flatmap(
    lambda fields: st.fixed_dictionaries({name: SHARED[name] for name in fields})
)


@given(st.lists(st.tuples(CHANGES, st.booleans(), ATTEMPTS), min_size=2, max_size=12))
def test_a_kept_block_is_only_ever_written_for_its_own_key(
    requests: list[tuple[dict[str, Any], bool, list[tuple[str, str, str | None]]]],
) -> None:
    """One encoder, one request after another, each with one or two of its shared fields
    changed from one record's (the request span's constant part is kept by them, an attempt's
    by its upstream, model and error), under a client's span or not: every span decodes to
    its own request's attributes, parent, status and its attempts' own."""
    encoder = SpanEncoder(settings())
    providers = {"sim": "openai", "claude": "anthropic"}
    for n, (changes, remote, tried) in enumerate(requests):
        changed = record(1, request_id=f"req-{n}", **changes)
        if changed.status == 429:
            changed = changed._replace(outcome="rate_limited", error="RateLimited")
        traced = Spans(trace_id=n + 1, span_id=n + 2, parent_id=n + 3 if remote else None,
                       started=1.0)  # fmt: skip
        for upstream, model, error in tried:
            attempt = traced.attempt(upstream, model)
            assert attempt is not None
            attempt[STARTED:] = 1.001, 1.002, error
        server, *children = decoded(encoder, encoder.request(changed, traced, T0))[1]
        assert attrs(server.attributes) == attributes(changed, providers[changed.upstream])
        assert server.parent_span_id == ((n + 3).to_bytes(8, "big") if remote else b"")
        assert server.flags == (0x301 if remote else 0x101)
        assert server.status.message == (changed.error or "")
        assert len(children) == len(tried)
        for child, (upstream, model, error) in zip(children, tried, strict=True):
            assert child.name == f"attempt {upstream}"
            assert attrs(child.attributes) == {
                "gen_ai.provider.name": providers[upstream], "gen_ai.request.model": model,
                "levergate.upstream": upstream, **({"error.type": error} if error else {}),
            }  # fmt: skip
            assert child.status.message == (error or "")


def test_the_kept_blocks_are_bounded() -> None:
    """Beyond `_KEPT` keys the oldest half is forgotten: a gateway seeing ever new models,
    tenants or token counts keeps a bounded encoder, and the spans stay right."""
    encoder = SpanEncoder(settings())
    for n in range(3 * _KEPT):
        changed = record(1, model=f"model-{n}", tokens=record(1).tokens._replace(input_uncached=n))
        traced = Spans(trace_id=1, span_id=2, started=1.0)
        attempt = traced.attempt("sim", f"model-{n}")
        assert attempt is not None
        server, child = decoded(encoder, encoder.request(changed, traced, T0))[1]
        assert attrs(server.attributes) == attributes(changed, "openai")
        assert attrs(child.attributes)["gen_ai.request.model"] == f"model-{n}"
    kept = (encoder._requests, encoder._attempts, encoder._tokens)
    assert all(0 < len(found) <= _KEPT for found in kept)


@pytest.mark.parametrize("attempts", [0, 1, 3])
def test_one_batch_of_every_shape_decodes_to_its_own_requests(attempts: int) -> None:
    """A request's fixed fields are packed with its first attempt's (the pack kept with the
    attempt's constant part, one with the time to the first chunk and one without): requests
    with and without it, with none, one or more attempts of one kept upstream and model, in
    one export, each decode to their own ids, times and doubles."""
    encoder = SpanEncoder(settings())
    made, listed = [], []
    for n in range(4):
        ttft = 0.25 if n % 2 else None
        changed = record(1, request_id=f"req-{n}", cost_usd=0.5 + n, queued_seconds=0.125 * n,
                         timings=record(1).timings._replace(total=1.5 + n, ttft=ttft))  # fmt: skip
        traced = Spans(trace_id=n + 1, span_id=n + 100, started=2.0 + n)
        for k in range(attempts):
            attempt = traced.attempt("sim", "fast-1", 2.0 + n + k / 8)
            assert attempt is not None
            attempt[ENDED] = 2.0 + n + k / 8 + 1 / 16
        made.append((changed, traced))
        listed.append(encoder.request(changed, traced, T0))
    spans = decoded(encoder, listed)[1]
    assert len(spans) == 4 * (1 + attempts)
    for n, (changed, traced) in enumerate(made):
        server, *children = spans[n * (1 + attempts) : (n + 1) * (1 + attempts)]
        assert (server.trace_id, server.span_id) == (traced.trace, traced.span)
        assert server.start_time_unix_nano == wall(2.0 + n)
        assert server.end_time_unix_nano == wall(2.0 + n) + int((1.5 + n) * 1e9)
        assert attrs(server.attributes) == attributes(changed, "openai")
        assert ("gen_ai.response.time_to_first_chunk" in attrs(server.attributes)) == bool(n % 2)
        for child, attempt in zip(children, traced.attempts, strict=True):
            assert (child.trace_id, child.span_id) == (traced.trace, attempt[SPAN])
            assert child.parent_span_id == traced.span
            assert child.start_time_unix_nano == wall(attempt[STARTED])
            assert child.end_time_unix_nano == wall(attempt[ENDED])
            assert attrs(child.attributes)["gen_ai.request.model"] == "fast-1"


def test_the_records_runs_hold_what_the_spans_read() -> None:
    """The encoder reads a record's fields by runs (slices: the record's order is tracing's):
    the request's own, the shared attributes' key, the queue wait, the levers."""
    fields: tuple[str, ...] = RequestRecord._fields  # (mypy types its slices by literals only)
    assert fields[_OWN] == ("request_id", "timings", "tokens", "cost_usd")
    assert set(fields[_SHARED]) == {
        "kind", "model", "feature", "outcome", "status", "error", "attempts", "retries", "tier",
        "priority", "origin", "upstream_model", "alias", "tenant", "upstream", "fallback",
        "workflow",
    }  # fmt: skip
    assert fields[_QUEUED] == "queued_seconds"
    assert fields[_LEVERS] == ("savings", "cache", "decision", "escalations", "trimmed_input")
