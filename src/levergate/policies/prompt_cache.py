"""Whether a provider prompt-cache breakpoint pays, and for how long: pure arithmetic.

Anthropic bills a cache write at 1.25x the input price for a 5-minute entry and 2x for a
1-hour one, and a read at 0.1x (REFERENCE.md; the 5-minute entry is refreshed on every read).
A breakpoint at the end of a prefix therefore changes what each request pays for that prefix
from 1.0 (no cache) to

    5 minutes:  f5  * 0.1 + (1 - f5)  * 1.25
    1 hour:     f60 * 0.1 + (1 - f60) * 2.0

where `f5` (`f60`) is the share of requests whose prefix was last used less than 5 minutes
(1 hour) before — those read the entry, the others write it again. The cheapest of the three
wins, so a breakpoint is placed only where the observed reuse pays for the writes:

    5 minutes pays when f5 > 0.25 / 1.15 = 0.217; 1 hour when f60 > 1.0 / 1.9 = 0.526,
    and 1 hour beats 5 minutes when 1.9 * f60 - 1.15 * f5 > 0.75.

Worked through for a burst of n requests (1 write, n - 1 reads): 5 minutes costs 1.25 +
0.1 (n - 1) against n, cheaper from n = 2 (one reuse); 1 hour costs 2 + 0.1 (n - 1), cheaper
from n = 3 (two reuses) — the break-even points Anthropic publishes.

`ReuseStats` keeps, per prefix, the times it was seen (bounded), and estimates f5 and f60 from
the gaps between consecutive uses; a prefix seen once has no evidence and gets no breakpoint.
"""

from __future__ import annotations

import enum
from collections import OrderedDict, deque
from dataclasses import dataclass

FIVE_MINUTES = 300.0
ONE_HOUR = 3600.0


class Ttl(enum.StrEnum):
    NONE = "none"
    FIVE_MINUTES = "5m"
    ONE_HOUR = "1h"


@dataclass(frozen=True, slots=True)
class CacheRates:
    """Multiples of the input price (Anthropic's published ones by default)."""

    write_5m: float = 1.25
    write_1h: float = 2.0
    read: float = 0.1


def cost_per_request(ttl: Ttl, *, f5: float, f60: float, rates: CacheRates) -> float:
    """What one request pays for the prefix, as a multiple of its uncached input price."""
    if ttl is Ttl.FIVE_MINUTES:
        return f5 * rates.read + (1.0 - f5) * rates.write_5m
    if ttl is Ttl.ONE_HOUR:
        return f60 * rates.read + (1.0 - f60) * rates.write_1h
    return 1.0


def best_ttl(*, f5: float, f60: float, rates: CacheRates = CacheRates()) -> Ttl:
    """The cheapest choice; no breakpoint on a tie with no cache (a write is a risk)."""
    costs = {t: cost_per_request(t, f5=f5, f60=f60, rates=rates) for t in Ttl}
    cheapest = min(costs.values())
    if costs[Ttl.NONE] <= cheapest:
        return Ttl.NONE
    return Ttl.FIVE_MINUTES if costs[Ttl.FIVE_MINUTES] <= costs[Ttl.ONE_HOUR] else Ttl.ONE_HOUR


class ReuseStats:
    """When each prefix (by digest) was used, the last `history` times, for at most
    `capacity` prefixes (least recently used forgotten)."""

    def __init__(self, *, capacity: int = 50_000, history: int = 16) -> None:
        self._capacity = capacity
        self._history = history
        self._seen: OrderedDict[int, deque[float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._seen)

    def observe(self, digest: int, *, now: float) -> None:
        times = self._seen.get(digest)
        if times is None:
            self._seen[digest] = deque([now], maxlen=self._history)
            while len(self._seen) > self._capacity:
                self._seen.popitem(last=False)
        else:
            times.append(now)
            self._seen.move_to_end(digest)

    def shares(self, digest: int, *, now: float) -> tuple[float, float]:
        """(f5, f60): the shares of this prefix's recent uses (the one happening `now`
        included) that followed the previous use within 5 minutes / 1 hour."""
        times = self._seen.get(digest)
        if not times:
            return 0.0, 0.0
        gaps = [b - a for a, b in zip(times, list(times)[1:], strict=False)]
        gaps.append(now - times[-1])
        n = len(gaps) + 1  # the first use ever wrote the entry: a miss with no gap before it
        return (
            sum(g < FIVE_MINUTES for g in gaps) / n,
            sum(g < ONE_HOUR for g in gaps) / n,
        )

    def last_seen(self, digest: int) -> float | None:
        times = self._seen.get(digest)
        return times[-1] if times else None
