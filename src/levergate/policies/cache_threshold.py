"""The semantic cache's threshold gate: from logged verifications to the threshold a route serves
at, for a target false-hit rate. Pure; `levergate cache threshold` reads the rows from the
request log and installs the choice (cli/cache.py), the cache samples and verifies
(layers/cache/checks.py).

What a row is. A sampled lookup of the semantic cache, with its would-be hit's similarity: the
first neighbour, best first, that the guards let through, down to the band's floor (`floor`:
the threshold then, less `calibration.band`). The lookup hits at every threshold up to that
similarity and misses above it, whether or not it was served then, so one row speaks for every
threshold at or above its floor. A row with no would-be hit (`similarity` None: nothing in the
band, or every neighbour refused) misses at every such threshold. A verified row also says
whether the would-be hit's answer agreed with the one the request really got (`agree`) or not
(`disagree`: a false hit); `failed` and `none` rows say nothing about that.

At a threshold T, over the rows whose floor is at most T:

    hit rate        = rows whose similarity >= T / rows
    false-hit rate  = disagreeing / verified, among the rows whose similarity >= T

with a Wilson score interval for the false-hit rate (the share of a small sample). `choose`
takes the lowest threshold (the most hits) among the verified similarities whose false-hit
rate (or, with `upper`, its interval's upper end) is at most the target, measured on at least
`min_verified` verifications; none qualifies: None. So a higher target never gives a higher
threshold, and no threshold is chosen on fewer verifications than the minimum.

What it does not see: a configured `verify_model` refuses some would-be hits on the request
path, which the band's checks do not ask (the measured false-hit rate is then an upper bound);
and a lower threshold stores fewer answers (more requests hit), which the rows, sampled at the
old threshold, cannot show.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = ["Point", "Verification", "choose", "curve", "point", "refusals", "wilson"]

AGREE, DISAGREE = "agree", "disagree"
Z_95 = 1.959963984540054


@dataclass(frozen=True, slots=True)
class Verification:
    similarity: float | None  # the would-be hit's (None: none down to the floor)
    floor: float  # the lowest similarity the lookup was checked down to
    result: str  # agree, disagree, failed or none


@dataclass(frozen=True, slots=True)
class Point:
    threshold: float
    lookups: int  # sampled lookups that speak for this threshold (floor <= threshold)
    hits: int  # of them, with a would-be hit at or above it
    verified: int  # of the hits, compared (agree or disagree)
    false_hits: int  # of the verified, disagreeing

    @property
    def hit_rate(self) -> float | None:
        return self.hits / self.lookups if self.lookups else None

    @property
    def false_hit_rate(self) -> float | None:
        return self.false_hits / self.verified if self.verified else None

    def interval(self, z: float = Z_95) -> tuple[float, float] | None:
        """The false-hit rate's Wilson score interval (None before any verification)."""
        return wilson(self.false_hits, self.verified, z) if self.verified else None

    def measured(self, *, upper: bool = False) -> float | None:
        """The false-hit rate the gate holds against the target: the point estimate, or with
        `upper` its interval's upper end."""
        found = self.interval() if upper else None
        return found[1] if found is not None else self.false_hit_rate


def wilson(k: int, n: int, z: float = Z_95) -> tuple[float, float]:
    """The Wilson score interval of `k` successes in `n` > 0 trials."""
    if n <= 0 or not 0 <= k <= n:
        raise ValueError("wilson: need 0 <= k <= n and n > 0")
    p = k / n
    z2 = z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    # Clamped to hold the estimate (floating point can put 1.0 a hair outside at k = n).
    return max(0.0, min(p, centre - half)), min(1.0, max(p, centre + half))


def point(rows: Iterable[Verification], threshold: float) -> Point:
    lookups = hits = verified = false_hits = 0
    for row in rows:
        if row.floor > threshold + 1e-12:
            continue
        lookups += 1
        if row.similarity is None or row.similarity < threshold:
            continue
        hits += 1
        if row.result in (AGREE, DISAGREE):
            verified += 1
            false_hits += row.result == DISAGREE
    return Point(threshold, lookups, hits, verified, false_hits)


def candidates(rows: Iterable[Verification]) -> list[float]:
    """The thresholds worth considering, ascending: each verified similarity (between two of
    them nothing changes among the verified rows)."""
    return sorted({r.similarity for r in rows
                   if r.similarity is not None and r.result in (AGREE, DISAGREE)})  # fmt: skip


def curve(rows: Sequence[Verification], thresholds: Iterable[float]) -> list[Point]:
    return [point(rows, t) for t in thresholds]


def choose(
    rows: Sequence[Verification], *, target: float, min_verified: int, upper: bool = False
) -> Point | None:
    """The lowest candidate threshold whose measured false-hit rate is at most `target` on at
    least `min_verified` verifications (module docstring), or None."""
    if min_verified < 1:
        raise ValueError("min_verified must be at least 1")
    for threshold in candidates(rows):
        found = point(rows, threshold)
        rate = found.measured(upper=upper)
        if found.verified >= min_verified and rate is not None and rate <= target + 1e-12:
            return found
    return None


def refusals(found: Point, *, target: float, min_verified: int, upper: bool = False) -> list[str]:
    """Why `found` (a threshold asked for by name) may not be installed; empty when it may."""
    reasons = []
    if found.verified < min_verified:
        reasons.append(f"threshold {found.threshold:.4f} has {found.verified} verified "
                       f"would-be hits; at least {min_verified} are needed "
                       "(--min-verifications)")  # fmt: skip
    rate = found.measured(upper=upper)
    if rate is not None and rate > target + 1e-12:
        what = "upper bound of the false-hit rate" if upper else "false-hit rate"
        reasons.append(f"threshold {found.threshold:.4f} has a measured {what} of {rate:.2%}, "
                       f"above the target {target:.2%}")  # fmt: skip
    return reasons
