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

The spans are built here from the record and its trace context, straight into OTLP's protobuf
bytes (otel/otlp.py), when the exporter gets the finished request (after its answer went out):
a request's spans are one `bytes`, one item of the exporter's bounded queue (otel/exporter.py).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from levergate.core.spans import SPAN_IDS
from levergate.layers.measure.record import NO_SAVINGS, OK, RequestRecord
from levergate.otel import otlp
from levergate.version import __version__

if TYPE_CHECKING:
    from levergate.config import Settings
    from levergate.core.spans import Attempt, Internal, Spans
    from levergate.layers.measure.record import Tokens

__all__ = ["SEMCONV_VERSION", "SpanEncoder", "attributes", "shared", "shared_key"]

SEMCONV_VERSION = "1.40.0"
SCHEMA_URL = f"https://opentelemetry.io/schemas/{SEMCONV_VERSION}"
OPERATIONS = {"chat": "chat", "completion": "text_completion", "embedding": "embeddings",
              "response": "chat"}  # fmt: skip
PROVIDERS = {"openai": "openai", "anthropic": "anthropic", "local": "levergate.local"}

_KEPT = 512  # encoded attribute blocks kept by their key, each kind
T = TypeVar("T")
Wall = Callable[[float], int]  # a time on the clock the spans were timed by -> Unix nanoseconds
# An attempt span's head and constant part, and the packs of a request's fixed fields with it
# and the attempt's own, without and with the time to the first chunk (`SpanEncoder._attempt`).
Attempted = tuple[bytes, Callable[..., bytes], Callable[..., bytes]]


def attributes(record: RequestRecord, provider: str) -> dict[str, Any]:
    """The request span's attributes (see the module docstring)."""
    return {**shared(shared_key(record, provider)), **_own(record)}


Shared = tuple[Any, ...]  # what `shared` reads of a record: the same for many requests


def shared_key(record: RequestRecord, provider: str) -> Shared:
    return (record.kind, provider, record.model, record.feature, record.outcome, record.status,
            record.error, record.attempts, record.retries, record.tier, record.priority,
            record.origin, record.upstream_model, record.alias, record.tenant, record.upstream,
            record.fallback, record.workflow)  # fmt: skip


def shared(key: Shared) -> dict[str, Any]:
    """The attributes that repeat from request to request (what was asked, what answered and
    how it ended), from `shared_key`'s tuple alone: the encoder keeps their bytes by it."""
    (kind, provider, model, feature, outcome, status, error, attempts, retries, tier, priority,
     origin, upstream_model, alias, tenant, upstream, fallback, workflow) = key  # fmt: skip
    found: dict[str, Any] = {
        "gen_ai.operation.name": OPERATIONS.get(kind, kind),
        "gen_ai.provider.name": provider,
        "gen_ai.request.model": model,
        "levergate.feature": feature,
        "levergate.outcome": outcome,
        "levergate.status": status,
        "levergate.attempts": attempts,
        "levergate.retries": retries,
        "levergate.tier": tier,
        "levergate.priority": str(priority.name).lower(),
        "levergate.origin": origin,
    }
    if upstream_model or alias:
        found["gen_ai.response.model"] = upstream_model or alias
    if outcome != OK:
        found["error.type"] = error or outcome
    optional = {"levergate.tenant": tenant, "levergate.alias": alias,
                "levergate.upstream": upstream, "levergate.fallback": fallback,
                "levergate.workflow": workflow}  # fmt: skip
    found.update((k, v) for k, v in optional.items() if v)
    return found


def _own(record: RequestRecord) -> dict[str, Any]:
    """This request's own attributes: its tokens, id, cost, times and levers (`SpanEncoder.request`
    writes the same)."""
    found = _usage(record)
    found.update({
        "levergate.request_id": record.request_id,
        "levergate.cost_usd": record.cost_usd,
        "levergate.queued_seconds": record.queued_seconds,
    })  # fmt: skip
    if record.timings.ttft is not None:
        found["gen_ai.response.time_to_first_chunk"] = record.timings.ttft
    if _has_levers(record):
        found.update(_levers(record))
    return found


def _usage(record: RequestRecord) -> dict[str, Any]:
    tokens = record.tokens
    return {
        "gen_ai.usage.input_tokens": tokens.input,
        "gen_ai.usage.output_tokens": tokens.output,
        "gen_ai.usage.cache_read.input_tokens": tokens.cached_read,
        "gen_ai.usage.cache_creation.input_tokens": tokens.cache_write,
    }


def _has_levers(record: RequestRecord) -> bool:
    return bool(record.savings or record.cache or record.decision or record.escalations
                or record.trimmed_input)  # fmt: skip


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


# The record is read by runs of its fields (its order is this module's: RequestRecord's
# comment; tests/unit/otel/test_otlp.py holds the runs), each by one slice, a copy in C, where
# `itemgetter`s of the 27 fields were ~2,500 instructions a request (the 17 of the shared key
# ~1,500; benchmarks/results/otelpack.md). Slices made once: a literal `record[4:21]` builds
# its slice each time (~100 instructions a slice more).
_OWN = slice(0, 4)  # the request's own fields: request_id, timings, tokens, cost_usd
# What `shared_key` reads but the provider (its upstream's, in the key already): kind ... workflow.
_SHARED = slice(4, 21)
_QUEUED = 21  # queued_seconds
_LEVERS = slice(22, 27)  # savings, cache, decision, escalations, trimmed_input
# A record without levers: unequal when any of them is set (an empty mapping of savings other
# than `NO_SAVINGS` compares equal to it; a falsy value that is not these writes no attribute).
_NO_LEVERS = (NO_SAVINGS, None, None, 0, 0)
_REQUEST_ID = "levergate.request_id"
# An attempt span's trace, span and parent ids and times, after its field head and constant
# part (kept): the first attempt's in the request's pack (`SpanEncoder._attempt`), a later one's
# by this one. The ids are written as W3C writes them (big-endian), whole; the fields' tags as
# little-endian.
_attempt_packer = struct.Struct("<H16sH8sH8sBQBQ")
_attempt_fixed = _attempt_packer.pack
_ATTEMPT_FIXED = _attempt_packer.size
_TRACE, _SPAN, _PARENT = 0x100A, 0x0812, 0x0822  # b"\x0a\x10", b"\x12\x08", b"\x22\x08"
# Seconds (x 1e9) to whole nanoseconds: the times are positive, so `floor` is `int`, and a
# builtin function's call is ~380 instructions less than `int`'s (a type's): 4 a request.
_whole = math.floor


class SpanEncoder:
    """A finished request's spans, and levergate's own (a workflow's), as OTLP `Span` bytes:
    the request's span and its attempts' children, with their measured start and end times
    moved to the wall clock by `wall`."""

    def __init__(self, settings: Settings) -> None:
        self._providers: Mapping[str, str] = {
            upstream.name: PROVIDERS.get(upstream.kind, upstream.kind)
            for upstream in settings.upstreams
        }
        self._writer = otlp.AttributeWriter(b"\x4a")  # Span.attributes, field 9
        self._attributes = self._writer.write
        self.resource = otlp.AttributeWriter(b"\x0a").write({  # Resource.attributes, field 1
            "service.name": settings.otel.service_name,
            # Not the OpenTelemetry SDK's: levergate writes the spans itself (otel/otlp.py).
            "telemetry.sdk.language": "python",
            "telemetry.sdk.name": "levergate",
            "telemetry.sdk.version": __version__,
        })  # fmt: skip
        self.scope = b"\x0a\x09levergate"  # InstrumentationScope.name
        # Spans' constant parts (otlp.span_constant): a request's by `_SHARED` (one dict
        # for requests continuing a trace, one for the rest), an attempt's by its upstream,
        # model and error.
        self._requests: dict[Shared, bytes] = {}
        self._remote: dict[Shared, bytes] = {}
        self._attempts: dict[tuple[str, str, str | None], Attempted] = {}
        self._tokens: dict[Tokens, bytes] = {}
        # The request id's field but its bytes, by their length (ids are of one length).
        self._request_ids: dict[int, bytes] = {}
        double = self._writer.double_head
        self._cost = double("levergate.cost_usd")
        self._queued = double("levergate.queued_seconds")
        self._ttft = double("gen_ai.response.time_to_first_chunk")
        # A request span's trace and span ids, times, cost and queue wait (their attributes'
        # heads as arguments), at the end of its span: one call, and with its first attempt's
        # (`_attempt`'s packs, the attempt span's head and constant part between) one call for
        # both spans.
        self._request_format = f"<H16sH8sBQBQ{len(self._cost)}sd{len(self._queued)}sd"
        self._ttft_format = f"{len(self._ttft)}sd"
        self._fixed = struct.Struct(self._request_format).pack
        self._fixed_ttft = struct.Struct(self._request_format + self._ttft_format).pack
        self._fixed_size = struct.calcsize(self._request_format)
        self._ttft_size = struct.calcsize("<" + self._ttft_format)
        self._heads: dict[int, bytes] = {}  # a span's field head by its size

    def request(self, record: RequestRecord, spans: Spans, base_ns: int) -> bytes:
        """The request's span (kind SERVER, under the client's span when it sent one) and a
        child per attempt (kind CLIENT, with the span id sent upstream), as fields of their
        `ScopeSpans`, one after the other in one `bytes` (1 + `len(spans.attempts)` spans);
        `base_ns`: the wall clock (Unix ns) when `time.perf_counter()` read 0. Written inline
        (a call or a `bytes` built less is ~1% of a span's cost): the rest kept encoded but the
        request id, then the ids, the times and the doubles of the request and its first
        attempt packed in one call, all the request's spans joined once."""
        fields: tuple[Any, ...] = record  # (mypy types a record's slices by literals only)
        request_id, timings, tokens, cost_usd = fields[_OWN]
        total, ttft_s = timings[0], timings[3]
        started = base_ns + _whole(spans.started * 1e9)
        ended = started + _whole(total * 1e9)
        key = fields[_SHARED]
        parent = spans.parent
        kept = self._requests if parent is None else self._remote
        # Each kept value is a non-empty `bytes`: `or` writes it when it is not kept yet.
        constant = kept.get(key) or self._request_constant(record, kept, key, parent)
        usage = self._tokens.get(tokens) or self._usage(record)
        data = request_id.encode()
        more = (self._request_ids.get(len(data)) or self._request_id_prefix(len(data))) + data
        if parent is not None:
            more += b"\x22\x08" + parent  # Span.parent_span_id
        if fields[_LEVERS] != _NO_LEVERS:  # (not `any`: a builtin's call, ~250 more)
            more += self._attributes(_levers(record))
        trace = spans.trace
        # The request's own span id, drawn here unless an attempt beyond the bound drew it.
        span = spans.span or next(SPAN_IDS.ids, None) or SPAN_IDS.refill()
        size = len(usage) + len(more) + len(constant) + self._fixed_size
        if ttft_s is not None:
            size += self._ttft_size
        head = self._heads.get(size) or self._head(size)
        attempts = spans.attempts
        if not attempts:
            return b"".join((head, usage, more, constant, self._fixed(
                _TRACE, trace, _SPAN, span, 0x39, started, 0x41, ended, self._cost, cost_usd,
                self._queued, fields[_QUEUED]) if ttft_s is None else self._fixed_ttft(
                _TRACE, trace, _SPAN, span, 0x39, started, 0x41, ended, self._cost, cost_usd,
                self._queued, fields[_QUEUED], self._ttft, ttft_s)))  # fmt: skip
        # The first attempt's span packed with the request's fixed fields (its head and
        # constant part between), any later one's after.
        upstream, model, attempt_span, attempt_started, attempt_ended, error = attempts[0]
        end = ended  # an attempt still open ends with the request, and none after it
        if attempt_ended is not None:
            end = base_ns + _whole(attempt_ended * 1e9)
            if end > ended:  # noqa: PLR1730 (`min`: a builtin's call, ~200 instructions more)
                end = ended
        attempt_constant, pack, pack_ttft = self._attempts.get(
            (upstream, model, error)) or self._attempt(upstream, model, error)  # fmt: skip
        fixed = pack(
            _TRACE, trace, _SPAN, span, 0x39, started, 0x41, ended, self._cost, cost_usd,
            self._queued, fields[_QUEUED], attempt_constant, _TRACE, trace, _SPAN, attempt_span,
            _PARENT, span, 0x39, base_ns + _whole(attempt_started * 1e9), 0x41, end,
        ) if ttft_s is None else pack_ttft(
            _TRACE, trace, _SPAN, span, 0x39, started, 0x41, ended, self._cost, cost_usd,
            self._queued, fields[_QUEUED], self._ttft, ttft_s, attempt_constant, _TRACE, trace,
            _SPAN, attempt_span, _PARENT, span, 0x39, base_ns + _whole(attempt_started * 1e9),
            0x41, end,
        )  # fmt: skip
        if len(attempts) == 1:
            return b"".join((head, usage, more, constant, fixed))
        return b"".join((head, usage, more, constant, fixed,
                         *self._later(attempts, trace, span, base_ns, ended)))  # fmt: skip

    def _later(
        self, attempts: list[Attempt], trace: bytes, span: bytes, base_ns: int, ended: int
    ) -> list[bytes]:
        """The spans of a request's attempts after its first (`request`'s): each one's head
        and constant part, then its ids and times."""
        found: list[bytes] = []
        for upstream, model, attempt_span, attempt_started, attempt_ended, error in attempts[1:]:
            end = ended
            if attempt_ended is not None:
                end = min(base_ns + _whole(attempt_ended * 1e9), ended)
            attempt_constant = (self._attempts.get((upstream, model, error))
                                or self._attempt(upstream, model, error))[0]  # fmt: skip
            found += (attempt_constant, _attempt_fixed(
                _TRACE, trace, _SPAN, attempt_span, _PARENT, span,
                0x39, base_ns + _whole(attempt_started * 1e9), 0x41, end))  # fmt: skip
        return found

    def _head(self, size: int) -> bytes:
        """A span's field head (`otlp.head`), kept by its size."""
        if len(self._heads) >= _KEPT:
            self._heads.clear()
        found = self._heads[size] = otlp.head(size)
        return found

    def _request_constant(
        self, record: RequestRecord, kept: dict[Shared, bytes], key: Shared, parent: bytes | None
    ) -> bytes:
        """A request span's constant part (`otlp.span_constant`), kept under `key`; `parent`:
        the client's span (then the parent is remote)."""
        provider = self._providers.get(record.upstream, "openai")
        return self._kept(kept, key, otlp.span_constant(
            name=f"{OPERATIONS.get(record.kind, record.kind)} {record.model}",
            kind=otlp.SERVER, attributes=self._attributes(shared(shared_key(record, provider))),
            error=None if record.outcome == OK else record.error or record.outcome,
            remote_parent=parent is not None))  # fmt: skip

    def _usage(self, record: RequestRecord) -> bytes:
        """The token counts' attributes, kept by the counts."""
        return self._kept(self._tokens, record.tokens, self._attributes(_usage(record)))

    def _request_id_prefix(self, size: int) -> bytes:
        """The field of a request id of `size` bytes but those bytes (kept by the size)."""
        prefix = self._writer.string(_REQUEST_ID, "x" * size)[: -size or None]
        if len(self._request_ids) < 64:
            self._request_ids[size] = prefix
        return prefix

    def _attempt(self, upstream: str, model: str, error: str | None) -> Attempted:
        """An attempt span's field head and constant part (`otlp.span_constant`) in one
        `bytes`, kept by what the constant holds (an attempt span's size is the constant's and
        `_ATTEMPT_FIXED`, so its head is the key's too), with the packs `request` writes a
        request's fixed fields with, then these bytes, then the attempt's ids and times (one
        with the time to the first chunk, one without): one pack for the two spans and one
        `bytes` fewer to join, ~2,000 instructions a request less than a pack each
        (benchmarks/results/otelpack.md)."""
        constant = otlp.span_constant(
            name=f"attempt {upstream}", kind=otlp.CLIENT, error=error, remote_parent=False,
            attributes=self._attributes({
                "gen_ai.provider.name": self._providers.get(upstream, "openai"),
                "gen_ai.request.model": model,
                "levergate.upstream": upstream,
                "error.type": error,  # None (left out) unless it failed
            }))  # fmt: skip
        constant = otlp.head(_ATTEMPT_FIXED + len(constant)) + constant
        attempt = f"{len(constant)}s{_attempt_packer.format[1:]}"
        request, ttft = self._request_format, self._request_format + self._ttft_format
        found = (constant, struct.Struct(request + attempt).pack,
                 struct.Struct(ttft + attempt).pack)  # fmt: skip
        return self._kept(self._attempts, (upstream, model, error), found)

    @staticmethod
    def _kept(kept: dict[Any, T], key: Any, value: T) -> T:
        """`value`, kept under `key` (the oldest half forgotten beyond `_KEPT`)."""
        if len(kept) >= _KEPT:
            for old in list(kept)[: _KEPT // 2]:
                del kept[old]
        kept[key] = value
        return value

    def internal(self, span: Internal, wall: Wall) -> bytes:
        """A span of levergate's own work (a workflow, a step: kind INTERNAL) with its chosen
        ids, already sent as the parent of the requests inside it."""
        values = {**span.attributes, "error.type": span.error}
        return otlp.span(
            trace_id=span.trace_id, span_id=span.span_id, parent_id=span.parent_id,
            name=span.name, kind=otlp.INTERNAL, start_ns=wall(span.started),
            end_ns=wall(span.ended), attributes=self._attributes(values), error=span.error,
        )  # fmt: skip
