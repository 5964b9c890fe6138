"""`Call`: the request as a value. Layers derive new calls; they never mutate one.

The body is the OpenAI-shaped JSON object the client sent (or the library built). It is typed
`Mapping` so nothing writes into it; `Call.with_body` makes a shallow copy with changes.

`Trace` is the one mutable thing a call carries: the request's span, a record that layers
append to (which upstream answered, how long the gateway waited on it, cache outcome,
attempts). It is how the measurement layer learns what happened below it without every
layer returning extra values.
"""

from __future__ import annotations

import dataclasses
import enum
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Kind = Literal["chat", "completion", "embedding"]


class Priority(enum.IntEnum):
    """Lower value is served first."""

    INTERACTIVE = 0
    DEFAULT = 1
    BATCH = 2

    @classmethod
    def parse(cls, text: str | None) -> Priority:
        if not text:
            return cls.DEFAULT
        try:
            return cls[text.strip().upper()]
        except KeyError:
            return cls.DEFAULT


@dataclass(slots=True)
class Trace:
    """The request's span. Times are `time.perf_counter()` seconds."""

    started: float = field(default_factory=time.perf_counter)
    upstream: str = ""
    upstream_model: str = ""
    # Seconds spent blocked on upstream I/O (connect, send, waiting for and reading bytes).
    upstream_seconds: float = 0.0
    attempts: int = 0
    annotations: dict[str, str] = field(default_factory=dict)

    def elapsed(self) -> float:
        return time.perf_counter() - self.started


@dataclass(frozen=True, slots=True)
class Context:
    """Everything about a call that is not the body. Set at the edge, read by layers."""

    request_id: str
    tenant: str = "default"
    priority: Priority = Priority.DEFAULT
    deadline: float | None = None  # absolute seconds on the gateway's clock, or None for none
    feature: str = ""
    # Incoming request headers, lower-cased; layers read their controls here
    # (cache-control, x-levergate-*). Empty for library calls without headers.
    headers: Mapping[str, str] = field(default_factory=dict)
    trace: Trace = field(default_factory=Trace)


@dataclass(frozen=True, slots=True)
class Call:
    kind: Kind
    body: Mapping[str, Any]
    ctx: Context
    # The JSON bytes `body` was parsed from, while the body is unchanged: an upstream can send
    # them as they are instead of serialising the body again (long prompts make that matter).
    raw: bytes | None = None

    @property
    def model(self) -> str:
        model = self.body.get("model")
        return model if isinstance(model, str) else ""

    @property
    def stream(self) -> bool:
        return self.body.get("stream") is True

    @property
    def wants_usage_chunk(self) -> bool:
        """Whether the client asked for the final usage chunk of a stream."""
        options = self.body.get("stream_options")
        return isinstance(options, Mapping) and options.get("include_usage") is True

    def with_body(self, **changes: Any) -> Call:
        return dataclasses.replace(self, body={**self.body, **changes}, raw=None)

    def with_ctx(self, **changes: Any) -> Call:
        return dataclasses.replace(self, ctx=dataclasses.replace(self.ctx, **changes))
