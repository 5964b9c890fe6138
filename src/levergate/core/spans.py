"""`Spans`: a request's W3C trace context and its upstream attempts, for tracing.

Set on `Trace.spans` by `Measure` only when tracing is on (`otel.endpoint`); None otherwise, so
the path without tracing pays one `is None` test per attempt. The request's trace continues the
client's `traceparent` (https://www.w3.org/TR/trace-context/) when it sent a valid one, else
starts a new trace; each upstream attempt gets its own span id, sent upstream as `traceparent`
(with the client's `tracestate`, when it continued the client's trace) so the provider's spans
(a self-hosted vLLM with tracing on) hang under the attempt. The spans themselves are built
after the request finished, from its record and these ids (levergate/otel/), never on the
request path.
"""

from __future__ import annotations

import os
import random
import re
import struct
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from levergate.core.ids import Batched, process_wide

__all__ = [
    "ENDED",
    "ERROR",
    "MODEL",
    "SPAN",
    "SPAN_IDS",
    "STARTED",
    "TRACE_IDS",
    "UPSTREAM",
    "Attempt",
    "IdBytes",
    "Internal",
    "Spans",
    "begin",
    "end",
    "new_span_id",
    "new_trace_id",
    "span_id",
]  # fmt: skip

# W3C's `traceparent`: lower-case hex only (a parent id with other characters MUST be ignored);
# a version above 00 is read for 00's fields and may carry more after a dash, 00 may not, and
# ff is invalid (`begin`).
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")
# W3C's `tracestate`, passed on upstream with the client's trace it belongs to: list-members
# `key=value` (a key of lower-case letters, digits and `_-*/@`; a value of printable ASCII but
# `,` and `=`, not ending in a space) separated by commas and optional blanks, empty members
# allowed, at most 32 members; a header past 512 characters or not so is not passed on (W3C:
# a vendor may discard it).
_STATE_MEMBER = (r"[a-z0-9][_0-9a-z\-*/@]{0,255}"
                 r"=[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]")  # fmt: skip
_TRACESTATE = re.compile(rf"[ \t]*(?:{_STATE_MEMBER})?(?:[ \t]*,[ \t]*(?:{_STATE_MEMBER})?)*[ \t]*")
_MAX_STATE, _MAX_STATE_MEMBERS = 512, 32
_MAX_ATTEMPTS = 64  # a request's attempts kept for spans (retries and fallbacks are bounded)
_HEADER = "00-%032x-%016x-%s"
_ZERO_TRACE, _ZERO_SPAN = "0" * 32, "0" * 16  # W3C's invalid ids


_getrandbits = random.getrandbits  # workflows' ids (`new_trace_id`, `new_span_id`)
_new = object.__new__


class IdBytes(Batched[bytes]):
    """Trace or span ids of `size` random bytes from `os.urandom`, `batch` at a time, as
    core/ids.py draws request ids (and for its reasons: one system call a batch, never a seeded
    generator): a batch is cut into ids by one `struct` call (~180 instructions an id) and an
    id is the next item of its tuple, drawn inline where it is hot:
    `next(ids.ids, None) or ids.refill()` (~400 instructions in all, where
    `random.getrandbits(128)` was ~900 and the encoder's `to_bytes` ~800 more). W3C forbids an
    all-zero id: a batch holding `size` zero bytes anywhere is drawn again."""

    __slots__ = ("_cut", "_size", "_zero")

    def __init__(self, size: int, batch: int = 256) -> None:
        super().__init__()
        self._size = size * batch
        self._cut = struct.Struct(f"{size}s" * batch).unpack
        self._zero = bytes(size)

    def refill(self) -> bytes:
        """A new batch (the last one is spent); returns its first id."""
        data = os.urandom(self._size)
        while self._zero in data:  # an all-zero id, or zeros across two ids: drawn again
            data = os.urandom(self._size)
        found: tuple[bytes, ...] = self._cut(data)
        self.ids = ids = iter(found)
        return next(ids)


# The process's ids, as core/ids.py's `IDS` (reset in a forked child).
TRACE_IDS, SPAN_IDS = process_wide(IdBytes(16)), process_wide(IdBytes(8))


def _nonzero(bits: int) -> int:
    return _getrandbits(bits) or 1


def new_trace_id() -> int:
    return _nonzero(128)


def new_span_id() -> int:
    return _nonzero(64)


def traceparent(trace_id: int, span_id: int, *, sampled: bool) -> str:
    return _HEADER % (trace_id, span_id, "01" if sampled else "00")


@dataclass(frozen=True, slots=True)
class Internal:
    """A finished span of levergate's own work beside the requests — a traced workflow and its
    steps (levergate/workflow.py) — with times on the gateway's clock. The requests made inside
    it carry its ids in `Controls.trace`, so their spans hang under it."""

    name: str
    trace_id: int
    span_id: int
    parent_id: int | None
    started: float
    ended: float
    attributes: Mapping[str, str | int | float | bool | list[str]]
    error: str | None = None  # the exception's class name when it failed


# An upstream attempt: a list, made on the request path, where a slotted object (`__init__`
# or `object.__new__` and six slot writes) was ~2,000 instructions and a list display ~500
# (callgrind, benchmarks/results/otel3.md). Its items, by these indexes: the upstream's name,
# the model sent, the span id (the 8 bytes OTLP writes; `span_id` reads it as a number), when
# it started and ended (`time.perf_counter()` seconds; `ended` None: still open when the
# request finished, as a stream's attempt is until the request ends) and the exception's
# class name when it failed (`end`).
UPSTREAM, MODEL, SPAN, STARTED, ENDED, ERROR = range(6)
Attempt = list[Any]


def end(attempt: Attempt, error: BaseException | None = None) -> None:
    """The attempt ended (now), failing with `error` when given; once only."""
    if attempt[ENDED] is None:
        attempt[ENDED] = time.perf_counter()
        if error is not None:
            attempt[ERROR] = type(error).__name__


def span_id(attempt: Attempt) -> int:
    """The attempt's span id as a number."""
    return int.from_bytes(attempt[SPAN], "big")


class Spans:
    """A traced request's context: its trace, the client's span it continues (`parent`),
    whether it is sampled, when its span started and its attempts. Made on the request path,
    so it holds only what the upstream's `traceparent` needs: the request's own span id is
    drawn when first needed (`own_span_id`: by the exporter, after the answer went out, or for
    an attempt beyond the bound); `span` is empty until then.

    The ids are kept as the bytes OTLP writes (`trace` 16, `span` and `parent` 8: W3C's
    big-endian order), drawn from `TRACE_IDS` and `SPAN_IDS` and put in hex for an upstream's
    `traceparent` (`bytes.hex`: a 128-bit int's `%032x` was ~1,800 instructions); `trace_id`,
    `span_id` and `parent_id` read them as numbers, and the constructor takes numbers."""

    __slots__ = ("attempts", "parent", "sampled", "span", "started", "state", "trace")

    def __init__(
        self,
        trace_id: int,
        span_id: int = 0,  # the request's span; 0: not drawn yet
        parent_id: int | None = None,  # the client's span, when it sent `traceparent`
        sampled: bool = True,
        started: float | None = None,  # the request's span starts (None: now)
    ) -> None:
        self.trace = trace_id.to_bytes(16, "big")
        self.span = span_id.to_bytes(8, "big") if span_id else b""
        self.parent = None if parent_id is None else parent_id.to_bytes(8, "big")
        self.state: str | None = None  # the client's `tracestate`, passed on (`begin`)
        self.sampled = sampled
        self.started = time.perf_counter() if started is None else started
        self.attempts: list[Attempt] = []

    @property
    def remote(self) -> bool:
        """Whether it continues a client's trace (a slot less to write on the request path:
        ~250 instructions a request, otel_pieces.py)."""
        return self.parent is not None

    @property
    def trace_id(self) -> int:
        return int.from_bytes(self.trace, "big")

    @property
    def span_id(self) -> int:
        """The request's span id; 0 until drawn."""
        return int.from_bytes(self.span, "big")

    @property
    def parent_id(self) -> int | None:
        return None if self.parent is None else int.from_bytes(self.parent, "big")

    def own_span_id(self) -> int:
        """The request's span id, drawn on first need."""
        return int.from_bytes(self.own_span(), "big")

    def own_span(self) -> bytes:
        """The request's span id's bytes, drawn on first need."""
        if not self.span:
            self.span = next(SPAN_IDS.ids, None) or SPAN_IDS.refill()
        return self.span

    def attempt(self, upstream: str, model: str, started: float | None = None) -> Attempt | None:
        """A new attempt's record, started at `started` (None: now); None beyond the bound (it
        still runs, untraced)."""
        attempts = self.attempts
        if len(attempts) >= _MAX_ATTEMPTS:
            return None
        span = next(SPAN_IDS.ids, None) or SPAN_IDS.refill()
        attempt = [upstream, model, span, time.perf_counter() if started is None else started,
                   None, None]  # fmt: skip
        attempts.append(attempt)
        return attempt

    def sent(self, upstream: str, model: str, started: float) -> tuple[Attempt | None, str]:
        """`attempt` and its `traceparent` in one call, as an upstream makes them (a method
        call fewer: ~450 instructions)."""
        attempts = self.attempts
        if len(attempts) >= _MAX_ATTEMPTS:
            return None, self.traceparent(None)
        span = next(SPAN_IDS.ids, None) or SPAN_IDS.refill()
        attempt = [upstream, model, span, started, None, None]
        attempts.append(attempt)
        return attempt, f"00-{self.trace.hex()}-{span.hex()}-{'01' if self.sampled else '00'}"

    def traceparent(self, attempt: Attempt | None) -> str:
        """The header an upstream gets: this trace, the attempt's span (the request's when the
        attempt was not kept)."""
        span = attempt[SPAN] if attempt is not None else self.own_span()
        return f"00-{self.trace.hex()}-{span.hex()}-{'01' if self.sampled else '00'}"


def _state(value: str | None) -> str | None:
    """A client's `tracestate` as passed on upstream (`_TRACESTATE`), None when it sent none or
    one not passed on."""
    if (not value or len(value) > _MAX_STATE or value.count(",") >= _MAX_STATE_MEMBERS * 2
            or _TRACESTATE.fullmatch(value) is None):  # fmt: skip
        return None
    members = [m.strip() for m in value.split(",") if m.strip()]
    if not members or len(members) > _MAX_STATE_MEMBERS:
        return None
    return ",".join(members)


def begin(
    headers: Mapping[str, str],
    ratio: float = 1.0,
    parent: str | None = None,
    started: float | None = None,
) -> Spans:
    """A request's trace context: it continues the client's `traceparent` (lower-cased header
    names, as `Context.headers` holds them), else `parent` (a library call's `Controls.trace`),
    when valid by W3C's rules (`_TRACEPARENT`), else starts a new trace sampled at `ratio`;
    `started`: when the request's span starts (None: now). A function called positionally, the
    object made inline: the classmethod with keywords and a helper's frame were ~1,600
    instructions a request more."""
    value = headers.get("traceparent") or parent
    spans = _new(Spans)
    spans.parent = spans.state = None
    if value and len(value) <= 128:
        found = _TRACEPARENT.fullmatch(value.strip())
        if found is not None and (found[5] is None or found[1] != "00") and found[1] != "ff":
            trace, parent_span = found[2], found[3]
            if trace != _ZERO_TRACE and parent_span != _ZERO_SPAN:
                spans.trace = bytes.fromhex(trace)
                spans.parent = bytes.fromhex(parent_span)
                spans.sampled = bool(int(found[4], 16) & 1)
                spans.state = _state(headers.get("tracestate"))
    if spans.parent is None:  # none sent, or not valid: a new trace
        spans.trace = next(TRACE_IDS.ids, None) or TRACE_IDS.refill()
        # random() < 1.0 always: the default ratio draws nothing.
        spans.sampled = ratio >= 1.0 or random.random() < ratio  # noqa: S311 (sampling)
    spans.span = b""
    spans.started = time.perf_counter() if started is None else started
    spans.attempts = []
    return spans
