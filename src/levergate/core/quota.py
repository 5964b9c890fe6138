"""`Quota`: a provider's rate-limit headroom for one endpoint key, as its last answer stated it.

OpenAI-style providers send `x-ratelimit-{limit,remaining,reset}-{requests,tokens}` on every
answer. The transport (`upstreams.http`) parses them once into this value and puts it on the
call's record; the balancer reads headroom and reset times from it, and Retry's backoff floor
reads `reset_floor`. Nobody re-reads header strings another layer copied.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from levergate.policies.backoff import parse_duration

DIMENSIONS = ("requests", "tokens")
# The header names of each dimension, built once: this runs on every answer.
_NAMES = {
    d: (f"x-ratelimit-limit-{d}", f"x-ratelimit-remaining-{d}", f"x-ratelimit-reset-{d}")
    for d in DIMENSIONS
}


@dataclass(frozen=True, slots=True)
class Window:
    """One dimension (requests or tokens) of a provider's rate limit; None where not sent."""

    limit: float | None = None
    remaining: float | None = None
    reset_seconds: float | None = None

    @property
    def share_left(self) -> float | None:
        if self.remaining is None or not self.limit:
            return None
        return max(0.0, min(1.0, self.remaining / self.limit))

    @property
    def exhausted(self) -> bool:
        return self.remaining is not None and self.remaining <= 0


@dataclass(frozen=True, slots=True)
class Quota:
    requests: Window = Window()
    tokens: Window = Window()

    @classmethod
    def from_headers(cls, headers: Mapping[str, str]) -> Quota | None:
        """The `x-ratelimit-*` headers of one answer, or None when it sent none."""
        requests, tokens = _window(headers, "requests"), _window(headers, "tokens")
        if requests is None and tokens is None:
            return None
        return cls(requests=requests or Window(), tokens=tokens or Window())

    @property
    def headroom(self) -> float | None:
        """The smallest share left across dimensions (0..1), or None when no limit was sent."""
        shares = [s for w in (self.requests, self.tokens) if (s := w.share_left) is not None]
        return min(shares) if shares else None

    def reset_floor(self) -> float | None:
        """Seconds until an exhausted window resets: only a dimension with nothing remaining
        says anything about when a retry can succeed."""
        floors = [
            w.reset_seconds
            for w in (self.requests, self.tokens)
            if w.exhausted and w.reset_seconds is not None
        ]
        return max(floors) if floors else None


def _window(headers: Mapping[str, str], dimension: str) -> Window | None:
    """The dimension's window, or None when the answer sent none of its headers."""
    limit_name, remaining_name, reset_name = _NAMES[dimension]
    limit, remaining, reset = (
        headers.get(limit_name),
        headers.get(remaining_name),
        headers.get(reset_name),
    )
    if limit is None and remaining is None and reset is None:
        return None
    return Window(
        limit=finite_number(limit),
        remaining=finite_number(remaining),
        reset_seconds=None if reset is None else parse_duration(reset),
    )


def finite_number(text: str | None) -> float | None:
    """A header's number, or None when absent, malformed or not finite."""
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None
