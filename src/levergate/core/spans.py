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
from dataclasses import dataclass, field

__all__ = ["Attempt", "Internal", "Spans", "new_span_id", "new_trace_id"]

_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_MAX_ATTEMPTS = 64  # a request's attempts kept for spans (retries and fallbacks are bounded)


_getrandbits = random.getrandbits  # ids: `_getrandbits(n) or 1` (never zero: W3C's invalid id)


def _nonzero(bits: int) -> int:
    return _getrandbits(bits) or 1


def new_trace_id() -> int:
    return _nonzero(128)


def new_span_id() -> int:
    return _nonzero(64)


def traceparent(trace_id: int, span_id: int, *, sampled: bool) -> str:
    return f"00-{trace_id:032x}-{span_id:016x}-{'01' if sampled else '00'}"


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


@dataclass(slots=True)
class Attempt:
    """One upstream call. Times are `time.perf_counter()` seconds; `ended` None: still open
    when the request finished (a stream's attempt ends with the request)."""

    upstream: str
    model: str
    span_id: int
    started: float
    ended: float | None = None
    error: str | None = None  # the exception's class name when the attempt failed

    def end(self, error: BaseException | None = None) -> None:
        if self.ended is None:
            self.ended = time.perf_counter()
            if error is not None:
                self.error = type(error).__name__


@dataclass(slots=True)
class Spans:
    trace_id: int
    span_id: int  # the request's span
    parent_id: int | None = None  # the client's span, when it sent `traceparent`
    sampled: bool = True
    remote: bool = False  # continues a client's trace
    started: float = field(default_factory=time.perf_counter)  # the request's span starts
    attempts: list[Attempt] = field(default_factory=list)

    @classmethod
    def begin(
        cls, headers: Mapping[str, str], *, ratio: float = 1.0, parent: str | None = None
    ) -> Spans:
        """Continue the client's `traceparent` (lower-cased header names, as `Context.headers`
        holds them), else `parent` (a library call's `Controls.trace`), when valid, else a new
        trace sampled at `ratio`."""
        value = headers.get("traceparent") or parent
        if value and len(value) <= 128:
            found = _TRACEPARENT.fullmatch(value.strip().lower())
            if found is not None:
                trace_id, parent_id = int(found[1], 16), int(found[2], 16)
                if trace_id and parent_id:
                    sampled = bool(int(found[3], 16) & 1)
                    return cls(trace_id, _nonzero(64), parent_id, sampled, remote=True)
        # random() < 1.0 always: the default ratio draws nothing.
        sampled = ratio >= 1.0 or random.random() < ratio  # noqa: S311 (sampling, not secrecy)
        return cls(_getrandbits(128) or 1, _getrandbits(64) or 1, sampled=sampled)

    def attempt(self, upstream: str, model: str) -> Attempt | None:
        """A new attempt's record (None beyond the bound: it still runs, untraced)."""
        if len(self.attempts) >= _MAX_ATTEMPTS:
            return None
        attempt = Attempt(upstream, model, _getrandbits(64) or 1, time.perf_counter())
        self.attempts.append(attempt)
        return attempt

    def traceparent(self, attempt: Attempt | None) -> str:
        """The header an upstream gets: this trace, the attempt's span (the request's when the
        attempt was not kept)."""
        span = attempt.span_id if attempt is not None else self.span_id
        return f"00-{self.trace_id:032x}-{span:016x}-{'01' if self.sampled else '00'}"
