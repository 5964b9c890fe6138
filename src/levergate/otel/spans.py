"""Spans from finished-request records, exported over OTLP/HTTP.

Follows the OpenTelemetry GenAI semantic conventions as of semantic-conventions v1.40
(status: Development; the attribute names are those opentelemetry-semantic-conventions 0.66b2
ships, before the GenAI conventions moved to their own repository): one span per request,
kind SERVER, named "{gen_ai.operation.name} {gen_ai.request.model}", with

- `gen_ai.operation.name` (chat, text_completion, embeddings), `gen_ai.provider.name` (the
  answering upstream's API: openai, anthropic; `levergate.local` for the embedded engine),
  `gen_ai.request.model` (what the client asked for) vs `gen_ai.response.model` (the model
  name the answering endpoint was sent: a fallback's, a router's choice);
- `gen_ai.usage.input_tokens` (the whole prompt), `gen_ai.usage.output_tokens`,
  `gen_ai.usage.cache_read.input_tokens`, `gen_ai.usage.cache_creation.input_tokens` (the
  conventions' name for prompt-cache writes);
- `gen_ai.response.time_to_first_chunk` (seconds, streams), `error.type` (the error's type,
  when the request failed);
- levergate's own under `levergate.`: request id, tenant, feature, alias, upstream, outcome,
  status, cost, savings by lever (`levergate.savings.<lever>`), cache and its outcome, route
  decision, escalations, attempts and retries, queue wait, tier, priority, workflow.

Each upstream attempt is a child span, kind CLIENT, with the span id that was sent upstream in
its `traceparent` (core/spans.py). No prompt or answer text is attached: that waits for the
request log's per-route body logging (issue 23 §1) to say when bodies may be kept.

The spans are built in the record's sink, after the answer went out (a few microseconds of
attribute building per request); the SDK's batch processor queues them (bounded, dropping
beyond `otel.max_queue`) and exports from its own thread.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from opentelemetry import trace as api
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator

from levergate.layers.measure.record import OK

if TYPE_CHECKING:
    from levergate.config import Settings
    from levergate.core.spans import Attempt, Internal, Spans
    from levergate.layers.measure.record import RequestRecord

__all__ = ["SEMCONV_VERSION", "SpanSink", "attributes", "tracer_provider"]

SEMCONV_VERSION = "1.40.0"
OPERATIONS = {"chat": "chat", "completion": "text_completion", "embedding": "embeddings",
              "response": "chat"}  # fmt: skip
PROVIDERS = {"openai": "openai", "anthropic": "anthropic", "local": "levergate.local"}


class _ChosenIds(IdGenerator):
    """The SDK's ids, except the span id set just before a span starts: the attempt's span id
    was already sent upstream in `traceparent`, so its span must carry that one."""

    def __init__(self) -> None:
        self._random = RandomIdGenerator()
        self.next_span: int | None = None
        self.next_trace: int | None = None

    def generate_span_id(self) -> int:
        chosen, self.next_span = self.next_span, None
        return chosen if chosen is not None else self._random.generate_span_id()

    def generate_trace_id(self) -> int:
        chosen, self.next_trace = self.next_trace, None
        return chosen if chosen is not None else self._random.generate_trace_id()


def tracer_provider(settings: Settings) -> tuple[TracerProvider, _ChosenIds]:
    otel = settings.otel
    if otel.endpoint is None:
        raise ValueError("tracing needs otel.endpoint")
    ids = _ChosenIds()
    resource = Resource.create({"service.name": otel.service_name})
    provider = TracerProvider(resource=resource, id_generator=ids)
    exporter = OTLPSpanExporter(
        endpoint=otel.endpoint.rstrip("/") + "/v1/traces",
        headers={k: v.get_secret_value() for k, v in otel.headers.items()},
        timeout=10,
    )
    processor = BatchSpanProcessor(
        exporter,
        max_queue_size=otel.max_queue,
        schedule_delay_millis=otel.export_interval_seconds * 1000,
        max_export_batch_size=min(512, otel.max_queue),
    )
    provider.add_span_processor(processor)
    return provider, ids


def attributes(record: RequestRecord, provider: str) -> dict[str, Any]:
    """The request span's attributes (see the module docstring)."""
    tokens = record.tokens
    found: dict[str, Any] = {
        "gen_ai.operation.name": OPERATIONS.get(record.kind, record.kind),
        "gen_ai.provider.name": provider,
        "gen_ai.request.model": record.model,
        "gen_ai.usage.input_tokens": tokens.input,
        "gen_ai.usage.output_tokens": tokens.output,
        "gen_ai.usage.cache_read.input_tokens": tokens.cached_read,
        "gen_ai.usage.cache_creation.input_tokens": tokens.cache_write,
        "levergate.request_id": record.request_id,
        "levergate.feature": record.feature,
        "levergate.outcome": record.outcome,
        "levergate.status": record.status,
        "levergate.cost_usd": record.cost_usd,
        "levergate.attempts": record.attempts,
        "levergate.retries": record.retries,
        "levergate.queued_seconds": record.queued_seconds,
        "levergate.tier": record.tier,
        "levergate.priority": str(record.priority.name).lower(),
        "levergate.origin": record.origin,
    }
    if record.upstream_model or record.alias:
        found["gen_ai.response.model"] = record.upstream_model or record.alias
    if record.timings.ttft is not None:
        found["gen_ai.response.time_to_first_chunk"] = record.timings.ttft
    if record.outcome != OK:
        found["error.type"] = record.error or record.outcome
    optional = {"levergate.tenant": record.tenant, "levergate.alias": record.alias,
                "levergate.upstream": record.upstream, "levergate.fallback": record.fallback,
                "levergate.workflow": record.workflow}  # fmt: skip
    found.update((k, v) for k, v in optional.items() if v)
    found.update(_levers(record))
    return found


def _levers(record: RequestRecord) -> dict[str, Any]:
    found: dict[str, Any] = {f"levergate.savings.{lever.value}": usd
                             for lever, usd in record.savings.items()}  # fmt: skip
    if record.savings:
        found["levergate.savings_usd"] = sum(record.savings.values())
    if (cache := record.cache) is not None:
        found["levergate.cache"] = cache.cache
        found["levergate.cache.outcome"] = str(cache.outcome)
    if (route := record.decision) is not None:
        found.update({"levergate.route.router": route.router, "levergate.route.chosen":
                      route.chosen, "levergate.route.default": route.default,
                      "levergate.route.reason": route.reason})  # fmt: skip
        if route.score is not None:
            found["levergate.route.score"] = route.score
    if record.escalations:
        found["levergate.cascade.escalations"] = record.escalations
        found["levergate.cascade.reasons"] = list(record.escalation_reasons)
    if record.trimmed_input:
        found["levergate.trim.input_tokens"] = record.trimmed_input
    return found


class SpanSink:
    """The recorder's tracer (`Recorder.trace_to`): from a finished request's record and its
    trace context, the request's span and its attempts' children, ended at once (the request
    is over) with their measured start and end times."""

    def __init__(self, provider: TracerProvider, ids: _ChosenIds, settings: Settings) -> None:
        self._tracer = provider.get_tracer("levergate", schema_url=_SCHEMA)
        self._ids = ids
        self._providers: Mapping[str, str] = {
            upstream.name: PROVIDERS.get(upstream.kind, upstream.kind)
            for upstream in settings.upstreams
        }
        self._spans: dict[str, Spans] = {}

    def export(self, record: RequestRecord, spans: Spans) -> None:
        if not spans.sampled:
            return
        now_ns, now_perf = time.time_ns(), time.perf_counter()

        def wall(perf: float) -> int:
            return now_ns - int((now_perf - perf) * 1e9)

        started = wall(spans.started)
        ended = started + int(record.timings.total * 1e9)
        provider = self._providers.get(record.upstream, "openai")
        name = f"{OPERATIONS.get(record.kind, record.kind)} {record.model}"
        # The ids already sent upstream: the request's span id, and for a new trace its id.
        self._ids.next_span, self._ids.next_trace = spans.span_id, spans.trace_id
        span = self._tracer.start_span(
            name, context=_parent(spans), kind=api.SpanKind.SERVER,
            attributes=attributes(record, provider), start_time=started,
        )  # fmt: skip
        self._ids.next_trace = None
        if record.outcome != OK:
            span.set_status(api.Status(api.StatusCode.ERROR, record.error or record.outcome))
        inside = api.set_span_in_context(span)
        for attempt in spans.attempts:
            self._attempt(attempt, inside, wall, ended)
        span.end(end_time=ended)

    def export_internal(self, spans: Sequence[Internal], *, now: float) -> None:
        """Spans of levergate's own work (a workflow and its steps), each with its chosen ids
        (already sent as the parent of the requests inside it) and its times moved from the
        gateway's clock to the wall clock."""
        now_ns = time.time_ns()

        def wall(at: float) -> int:
            return now_ns - int((now - at) * 1e9)

        for span in spans:
            parent = Context()
            if span.parent_id is not None:
                sampled = api.TraceFlags(api.TraceFlags.SAMPLED)
                local = api.SpanContext(
                    span.trace_id, span.parent_id, is_remote=False, trace_flags=sampled
                )
                parent = api.set_span_in_context(api.NonRecordingSpan(local), Context())
            self._ids.next_span, self._ids.next_trace = span.span_id, span.trace_id
            started = self._tracer.start_span(
                span.name, context=parent, kind=api.SpanKind.INTERNAL,
                attributes=dict(span.attributes), start_time=wall(span.started),
            )  # fmt: skip
            self._ids.next_trace = None
            if span.error is not None:
                started.set_attribute("error.type", span.error)
                started.set_status(api.Status(api.StatusCode.ERROR, span.error))
            started.end(end_time=wall(span.ended))

    def _attempt(self, attempt: Attempt, inside: Any, wall: Any, ended: int) -> None:
        self._ids.next_span = attempt.span_id
        child = self._tracer.start_span(
            f"attempt {attempt.upstream}", context=inside, kind=api.SpanKind.CLIENT,
            start_time=wall(attempt.started),
            attributes={"gen_ai.provider.name": self._providers.get(attempt.upstream, "openai"),
                        "gen_ai.request.model": attempt.model,
                        "levergate.upstream": attempt.upstream},
        )  # fmt: skip
        if attempt.error is not None:
            child.set_attribute("error.type", attempt.error)
            child.set_status(api.Status(api.StatusCode.ERROR, attempt.error))
        end = min(wall(attempt.ended), ended) if attempt.ended is not None else ended
        child.end(end_time=end)


def _parent(spans: Spans) -> Context:
    """The client's span as a remote parent, or an empty context (a new trace)."""
    if spans.parent_id is None:
        return Context()
    remote = api.SpanContext(spans.trace_id, spans.parent_id, is_remote=True,
                             trace_flags=api.TraceFlags(api.TraceFlags.SAMPLED))  # fmt: skip
    return api.set_span_in_context(api.NonRecordingSpan(remote), Context())


_SCHEMA = f"https://opentelemetry.io/schemas/{SEMCONV_VERSION}"
