"""How long to wait before a retry: full-jitter exponential backoff, floored by what the
provider told us.

Full jitter (`sleep = uniform(0, min(cap, base * 2**attempt))`) spreads the retries of many
clients that failed together, where plain exponential backoff would send them back in
lock-step and recreate the burst that failed them. The provider's own hints — `Retry-After`,
`retry-after-ms`, and `x-ratelimit-reset-*` when a remaining count hit zero — are floors: a
retry before them is a wasted attempt and another 429.

Policies are immutable values; randomness comes from the caller's `random.Random`.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


@dataclass(frozen=True, slots=True)
class FullJitter:
    """`attempt` counts retries from 0 (the first retry)."""

    base: float = 0.25
    cap: float = 8.0

    def ceiling(self, attempt: int) -> float:
        # 2**attempt overflows nothing here: the exponent is clamped before it can matter.
        return min(self.cap, self.base * 2.0 ** min(attempt, 62))

    def delay(self, attempt: int, *, rng: random.Random, floor: float = 0.0) -> float:
        """A jittered delay, never below `floor` (the provider's hint)."""
        return max(floor, rng.uniform(0.0, self.ceiling(attempt)))


def parse_duration(text: str) -> float | None:
    """OpenAI's reset format (Go durations: `120ms`, `1s`, `6m0s`, `1h2m3.5s`) or plain seconds."""
    text = text.strip()
    if not text:
        return None
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    total = 0.0
    position = 0
    for match in _DURATION.finditer(text):
        if match.start() != position:
            return None
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        position = match.end()
    return total if position == len(text) else None


def retry_floor(*, retry_after: float | None, reset: float | None) -> float:
    """The earliest sensible retry, in seconds from now, from every hint the provider gave:
    `Retry-After` and the reset time of an exhausted rate-limit window (`core.quota.Quota`)."""
    hints = [h for h in (retry_after, reset) if h is not None]
    return max(hints) if hints else 0.0
