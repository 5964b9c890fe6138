"""The seam between the load generator and the wire, and the tally of what came back.

`Sender` is one method: send an encoded body, return an `Outcome` with absolute timestamps from
the run's clock. The aiohttp sender is the real one; tests plug in a fake that sleeps on a
virtual clock. The `Recorder` turns outcomes into latency samples measured from each request's
*intended* send time (wrk2's correction for coordinated omission); in a closed loop the
intended time is simply the send time.
"""

from __future__ import annotations

import dataclasses
from array import array
from collections import Counter
from typing import Protocol


class Outcome:
    """What one exchange produced. `error` is None on success, else a kind such as `http_429`,
    `timeout`, `connection` or `protocol`. Token counts are None when the server did not say."""

    __slots__ = (
        "cached_tokens",
        "end_at",
        "error",
        "first_token_at",
        "itls",
        "output_tokens",
        "prompt_tokens",
        "status",
    )

    def __init__(self, *, end_at: float, status: int = 200, error: str | None = None) -> None:
        self.end_at = end_at
        self.status = status
        self.error = error
        self.first_token_at: float | None = None
        self.itls: list[float] = []
        self.output_tokens: int | None = None
        self.prompt_tokens: int | None = None
        self.cached_tokens: int | None = None


class Sender(Protocol):
    async def send(self, body: bytes) -> Outcome: ...


@dataclasses.dataclass(frozen=True, slots=True)
class Snapshot:
    """Counters for the live progress line."""

    elapsed_s: float
    sent: int
    done: int
    errors: int
    late: int


class Recorder:
    """Append-only samples in seconds. All arrays grow only at completion (or launch, for the
    send lag), so the per-request cost is a handful of appends."""

    __slots__ = (
        "cached_tokens",
        "done",
        "dropped",
        "errors",
        "first_sent_at",
        "itl",
        "last_sent_at",
        "late",
        "late_after_s",
        "ok",
        "output_tokens",
        "prompt_tokens",
        "repeats",
        "send_lag",
        "sent",
        "service",
        "total",
        "ttft",
    )

    def __init__(self, *, late_after_s: float) -> None:
        self.late_after_s = late_after_s
        self.sent = 0
        self.done = 0
        self.ok = 0
        self.late = 0
        self.dropped = 0
        self.repeats = 0
        self.first_sent_at: float | None = None
        self.last_sent_at: float | None = None
        self.errors: Counter[str] = Counter()
        self.ttft: array[float] = array("d")
        self.total: array[float] = array("d")
        self.service: array[float] = array("d")
        self.itl: array[float] = array("d")
        self.send_lag: array[float] = array("d")
        self.output_tokens: array[float] = array("d")
        self.prompt_tokens: array[float] = array("d")
        self.cached_tokens: array[float] = array("d")

    def launched(self, *, intended: float, sent: float, repeated: bool) -> None:
        lag = sent - intended
        if self.first_sent_at is None:
            self.first_sent_at = sent
        self.last_sent_at = sent
        self.sent += 1
        self.send_lag.append(lag)
        if lag > self.late_after_s:
            self.late += 1
        if repeated:
            self.repeats += 1

    def finished(self, outcome: Outcome, *, intended: float, sent: float) -> None:
        self.done += 1
        if outcome.error is not None:
            self.errors[outcome.error] += 1
            return
        self.ok += 1
        self.total.append(outcome.end_at - intended)
        self.service.append(outcome.end_at - sent)
        if outcome.first_token_at is not None:
            self.ttft.append(outcome.first_token_at - intended)
        if outcome.itls:
            self.itl.extend(outcome.itls)
        if outcome.output_tokens is not None:
            self.output_tokens.append(outcome.output_tokens)
        if outcome.prompt_tokens is not None:
            self.prompt_tokens.append(outcome.prompt_tokens)
        if outcome.cached_tokens is not None:
            self.cached_tokens.append(outcome.cached_tokens)

    def snapshot(self, *, elapsed_s: float) -> Snapshot:
        return Snapshot(
            elapsed_s=elapsed_s,
            sent=self.sent,
            done=self.done,
            errors=self.done - self.ok,
            late=self.late,
        )
