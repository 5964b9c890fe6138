"""The latency model the replay uses, fitted to the logged timings: the simulator's own model
(simulator/latency.py),

    TTFT  = ttft_ms + prefill_ms_per_token x uncached prompt tokens
    total = TTFT + (output tokens - 1) / tokens_per_second

fitted per answering model by least squares over the log's successful requests:

- Streams measured their TTFT: `ttft_ms` and `prefill_ms_per_token` are the line through
  (uncached prompt tokens, TTFT), and `tokens_per_second` the median of each stream's
  (output - 1) / (total - TTFT).
- Whole answers measured only their total: the three are fitted at once on (uncached, output)
  -> total.

A slope the data makes negative (noise, or a prompt cache the log does not show) is held at 0
and the rest refitted. A model with fewer than `MIN_SAMPLES` requests takes the fit over every
model, and an input with no timings (a request file, a trace) the simulator settings of the
benchmarks (`ASSUMED`), said so in the output.

How the replay uses it: a request whose uncached prompt changes (a warmer prompt cache) keeps
its own logged times shifted by the fitted prefill cost of the difference, so each request's
noise stays its own; only requests with no logged times take the model's times whole.
Pure: no I/O.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import NamedTuple

__all__ = ["ASSUMED", "MIN_SAMPLES", "Latency", "Point", "fit", "fit_models", "solve"]

MIN_SAMPLES = 5


class Latency(NamedTuple):
    ttft_ms: float
    prefill_ms_per_token: float
    tokens_per_second: float
    samples: int = 0
    fitted: bool = False

    def ttft(self, uncached: int) -> float:
        """Seconds to the first token."""
        return (self.ttft_ms + self.prefill_ms_per_token * max(0, uncached)) / 1000.0

    def total(self, uncached: int, output: int) -> float:
        decode = max(0, output - 1) / self.tokens_per_second if self.tokens_per_second else 0.0
        return self.ttft(uncached) + decode

    def shift(self, uncached_change: int) -> float:
        """Seconds a request's TTFT (and total) moves when its uncached prompt changes."""
        return self.prefill_ms_per_token * uncached_change / 1000.0


# The simulator settings of benchmarks/tiers.py: ~60 tokens/s after a 0.4 s first token.
ASSUMED = Latency(ttft_ms=400.0, prefill_ms_per_token=0.2, tokens_per_second=60.0)


class Point(NamedTuple):
    """One logged request: seconds, tokens."""

    uncached: int
    output: int
    ttft: float | None
    total: float


def solve(rows: Sequence[Sequence[float]], ys: Sequence[float]) -> list[float] | None:
    """Least squares: the coefficients `c` minimising sum((row . c - y)^2), by the normal
    equations and Gaussian elimination with partial pivoting; None when singular."""
    k = len(rows[0])
    a = [[sum(r[i] * r[j] for r in rows) for j in range(k)] for i in range(k)]
    b = [sum(r[i] * y for r, y in zip(rows, ys, strict=True)) for i in range(k)]
    for col in range(k):
        pivot = max(range(col, k), key=lambda i: abs(a[i][col]))
        if abs(a[pivot][col]) < 1e-12 * max(1.0, abs(a[col][col])):
            return None
        a[col], a[pivot], b[col], b[pivot] = a[pivot], a[col], b[pivot], b[col]
        for i in range(col + 1, k):
            f = a[i][col] / a[col][col]
            a[i] = [x - f * y for x, y in zip(a[i], a[col], strict=True)]
            b[i] -= f * b[col]
    out = [0.0] * k
    for i in range(k - 1, -1, -1):
        out[i] = (b[i] - sum(a[i][j] * out[j] for j in range(i + 1, k))) / a[i][i]
    return out


def _nonnegative(xs: Sequence[Sequence[float]], ys: Sequence[float]) -> list[float]:
    """`solve` with an intercept, slopes held at 0 where they come out negative."""
    k = len(xs[0])
    free = list(range(k))
    while True:
        rows = [[1.0, *(x[i] for i in free)] for x in xs]
        found = solve(rows, ys) if len(rows) > len(free) else None
        if found is None:  # no spread in the data: the mean alone
            return [max(0.0, statistics.fmean(ys)), *([0.0] * k)]
        slopes = dict(zip(free, found[1:], strict=True))
        negative = [i for i, s in slopes.items() if s < 0]
        if not negative:
            return [max(0.0, found[0]), *(slopes.get(i, 0.0) for i in range(k))]
        free = [i for i in free if i not in negative]
        if not free:
            return [max(0.0, statistics.fmean(ys)), *([0.0] * k)]


def fit(points: Sequence[Point]) -> Latency | None:
    """The model of `points` (module docstring), or None with fewer than `MIN_SAMPLES`."""
    if len(points) < MIN_SAMPLES:
        return None
    streamed = [p for p in points if p.ttft is not None]
    if len(streamed) >= MIN_SAMPLES:
        base, prefill = _nonnegative([[p.uncached] for p in streamed],
                                     [p.ttft or 0.0 for p in streamed])  # fmt: skip
        rates = [(p.output - 1) / (p.total - p.ttft) for p in streamed
                 if p.ttft is not None and p.output > 1 and p.total > p.ttft]  # fmt: skip
        tps = statistics.median(rates) if rates else 0.0
        return Latency(base * 1000.0, prefill * 1000.0, tps, len(points), fitted=True)
    base, prefill, per_output = _nonnegative(
        [[p.uncached, max(0, p.output - 1)] for p in points], [p.total for p in points]
    )
    tps = 1.0 / per_output if per_output > 0 else 0.0
    return Latency(base * 1000.0, prefill * 1000.0, tps, len(points), fitted=True)


def fit_models(points: Iterable[tuple[str, Point]]) -> tuple[dict[str, Latency], Latency]:
    """Each model's fit, and the fit over all of them (`ASSUMED` when there are too few)."""
    by_model: dict[str, list[Point]] = defaultdict(list)
    for model, point in points:
        by_model[model].append(point)
    every = [p for found in by_model.values() for p in found]
    overall = fit(every) or ASSUMED
    return {m: fit(found) or overall for m, found in by_model.items()}, overall
