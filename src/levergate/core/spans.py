"""`Spans`: a request's W3C trace context and its upstream attempts, for tracing.

Set on `Trace.spans` by `Measure` only when tracing is on (`otel.endpoint`); None otherwise, so
the path without tracing pays one `is None` test per attempt. The request's trace continues the
client's `traceparent` (https://www.w3.org/TR/trace-context/) when it sent a valid one, else
starts a new trace; each upstream attempt gets its own span id, sent upstream as `traceparent`
so the provider's spans (a self-hosted vLLM with tracing on) hang under the attempt. The spans
themselves are built after the request finished, from its record and these ids
(levergate/otel/), never on the request path.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["Attempt", "Internal", "Spans", "new_span_id", "new_trace_id"]

_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_MAX_ATTEMPTS = 64  # a request's attempts kept for spans (retries and fallbacks are bounded)
_HEADER = "00-%032x-%016x-%s"


_getrandbits = random.getrandbits  # ids: `_getrandbits(n) or 1` (never zero: W3C's invalid id)


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


class Attempt:
    """One upstream call. Times are `time.perf_counter()` seconds; `ended` None: still open
    when the request finished (a stream's attempt ends with the request). A plain class with
    slots: made on the request path, where a dataclass's `__init__` costs twice as much."""

    __slots__ = ("ended", "error", "model", "span_id", "started", "upstream")

    def __init__(self, upstream: str, model: str, span_id: int, started: float) -> None:
        self.upstream = upstream
        self.model = model
        self.span_id = span_id
        self.started = started
        self.ended: float | None = None
        self.error: str | None = None  # the exception's class name when the attempt failed

    def end(self, error: BaseException | None = None) -> None:
        if self.ended is None:
            self.ended = time.perf_counter()
            if error is not None:
                self.error = type(error).__name__


class Spans:
    """A traced request's context: its trace, the client's span it continues (`parent_id`),
    whether it is sampled, when its span started and its attempts. Made on the request path,
    so it holds only what the upstream's `traceparent` needs: the request's own span id is
    drawn when first needed (`own_span_id`: by the exporter, after the answer went out, or for an
    attempt beyond the bound); `span_id` 0 until then."""

    __slots__ = ("attempts", "parent_id", "remote", "sampled", "span_id", "started", "trace_id")

    def __init__(  # noqa: PLR0917 (made on the request path: positional arguments cost less)
        self,
        trace_id: int,
        span_id: int = 0,  # the request's span; 0: not drawn yet
        parent_id: int | None = None,  # the client's span, when it sent `traceparent`
        sampled: bool = True,
        remote: bool = False,  # continues a client's trace
        started: float | None = None,  # the request's span starts (None: now)
    ) -> None:
        self.trace_id = trace_id
        self.span_id = span_id
        self.parent_id = parent_id
        self.sampled = sampled
        self.remote = remote
        self.started = time.perf_counter() if started is None else started
        self.attempts: list[Attempt] = []

    def own_span_id(self) -> int:
        """The request's span id, drawn on first need."""
        if not self.span_id:
            self.span_id = _getrandbits(64) or 1
        return self.span_id

    @classmethod
    def begin(
        cls,
        headers: Mapping[str, str],
        *,
        ratio: float = 1.0,
        parent: str | None = None,
        started: float | None = None,
    ) -> Spans:
        """Continue the client's `traceparent` (lower-cased header names, as `Context.headers`
        holds them), else `parent` (a library call's `Controls.trace`), when valid, else a new
        trace sampled at `ratio`; `started`: when the request's span starts (None: now)."""
        value = headers.get("traceparent") or parent
        if value:
            if len(value) <= 128:
                found = _TRACEPARENT.fullmatch(value.strip().lower())
                if found is not None:
                    trace_id, parent_id = int(found[1], 16), int(found[2], 16)
                    if trace_id and parent_id:
                        sampled = bool(int(found[3], 16) & 1)
                        return cls(trace_id, 0, parent_id, sampled, True, started)  # noqa: FBT003
        elif ratio >= 1.0:  # the default: every request traced, nothing to draw for it
            return cls(_getrandbits(128) or 1, 0, None, True, False, started)  # noqa: FBT003
        # random() < 1.0 always: the default ratio draws nothing.
        sampled = ratio >= 1.0 or random.random() < ratio  # noqa: S311 (sampling, not secrecy)
        return cls(_getrandbits(128) or 1, 0, None, sampled, False, started)  # noqa: FBT003

    def attempt(self, upstream: str, model: str, started: float | None = None) -> Attempt | None:
        """A new attempt's record, started at `started` (None: now); None beyond the bound (it
        still runs, untraced)."""
        attempts = self.attempts
        if len(attempts) >= _MAX_ATTEMPTS:
            return None
        attempt = Attempt(upstream, model, _getrandbits(64) or 1,
                          time.perf_counter() if started is None else started)  # fmt: skip
        attempts.append(attempt)
        return attempt

    def traceparent(self, attempt: Attempt | None) -> str:
        """The header an upstream gets: this trace, the attempt's span (the request's when the
        attempt was not kept). %-formatting: an f-string's format specs cost ~1.5x more."""
        span = attempt.span_id if attempt is not None else self.own_span_id()
        return _HEADER % (self.trace_id, span, "01" if self.sampled else "00")
