"""Exact percentiles over every sample, no histogram and no sampling.

Method: linear interpolation between closest ranks (Hyndman & Fan type 7, the default of numpy
and of `statistics.quantiles(method="inclusive")`): for n sorted values and quantile q, with
h = (n - 1) * q, the result is v[floor h] + (h - floor h) * (v[floor h + 1] - v[floor h]).
Samples are kept in `array('d')` (8 bytes each), so a million samples cost 8 MB; exactness is
worth that at the request rates a single client machine can drive.

Pure functions only: the recorder that fills the arrays lives in `recorder.py`.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Sequence

REPORTED_PERCENTILES = (50.0, 90.0, 95.0, 99.0)


def percentile(ordered: Sequence[float], q: float) -> float:
    """The q-th percentile (0 <= q <= 100) of an ascending, non-empty sequence."""
    n = len(ordered)
    if n == 0:
        raise ValueError("percentile of no samples")
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile {q} outside [0, 100]")
    h = (n - 1) * (q / 100.0)
    lo = math.floor(h)
    hi = min(lo + 1, n - 1)
    low, high = ordered[lo], ordered[hi]
    value = low + (h - lo) * (high - low)
    # Rounding must never carry the result outside its two neighbours: that keeps
    # percentiles monotone in q and within [min, max].
    return min(max(value, low), high)


def percentiles(values: Iterable[float], qs: Sequence[float]) -> list[float]:
    """Several percentiles of unsorted values, sorting once."""
    ordered = sorted(values)
    return [percentile(ordered, q) for q in qs]


def summarize(values: array[float] | Sequence[float], *, scale: float = 1000.0) -> dict[str, float]:
    """count, mean, min, p50, p90, p95, p99, max; values multiplied by `scale` (seconds to
    milliseconds by default). No samples: only `count: 0`, so a report never invents a zero."""
    if not values:
        return {"count": 0}
    ordered = sorted(values)
    summary = {
        "count": len(ordered),
        "mean": math.fsum(ordered) / len(ordered) * scale,
        "min": ordered[0] * scale,
    }
    for q in REPORTED_PERCENTILES:
        summary[f"p{q:g}"] = percentile(ordered, q) * scale
    summary["max"] = ordered[-1] * scale
    return summary


def mean(values: array[float] | Sequence[float]) -> float | None:
    return math.fsum(values) / len(values) if values else None
