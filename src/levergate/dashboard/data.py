"""What the dashboard's charts show, computed from the request log's query results (requestlog/
store.py: `summary`, `series`, `latencies`, `groups`). Pure: no I/O, no clock of its own.

A time range is a duration from 5 minutes to 7 days ending now (`window`), cut into at most
`MAX_POINTS` buckets of a round size; every bucket is in the series, empty ones as zeros (or
null for a percentile of no requests), so a chart's x axis is the whole range and an empty
gateway draws empty charts. Latency percentiles are exact over the log's records when there are
at most `store.MAX_SAMPLES` in the range, else over an even sample of them (`sampled`).
"""

from __future__ import annotations

import math
import re
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from levergate.errors import BadRequest
from levergate.policies.pricing import Lever

__all__ = ["MAX_RANGE", "MIN_RANGE", "Window", "caches", "latency", "series", "totals", "window"]

MIN_RANGE = 300.0  # 5 minutes
MAX_RANGE = 7 * 86400.0  # 7 days: the request log's default age bound
MAX_POINTS = 120
# Round bucket sizes (seconds): the first that cuts the range into at most MAX_POINTS.
STEPS = (5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600)
QUANTILES = (50.0, 95.0, 99.0)
_RANGE = re.compile(r"^(\d{1,6})([smhd])$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}
LEVERS = tuple(str(lever) for lever in Lever)


@dataclass(frozen=True, slots=True)
class Window:
    since: float
    until: float
    bucket: float

    @property
    def starts(self) -> list[float]:
        """Every bucket's start, oldest first (aligned on multiples of the bucket size, as the
        store's `series` groups them)."""
        first = math.floor(self.since / self.bucket)
        last = math.floor(self.until / self.bucket)
        return [b * self.bucket for b in range(first, last + 1)]

    def describe(self) -> dict[str, float]:
        return {"since": self.since, "until": self.until, "bucket_seconds": self.bucket,
                "range_seconds": self.until - self.since}  # fmt: skip


def window(text: str, *, now: float) -> Window:
    """The range `text` names (`5m`, `1h`, `7d`...: 5 minutes to 7 days), ending `now`."""
    found = _RANGE.match(text.strip()) if len(text) <= 16 else None
    seconds = float(found[1]) * _UNIT[found[2]] if found else math.nan
    if not MIN_RANGE <= seconds <= MAX_RANGE:
        raise BadRequest(
            f"'range' must be a duration from 5m to 7d such as 15m, 6h or 7d; got {text[:16]!r}.",
            param="range",
        )
    bucket = next((s for s in STEPS if seconds / s <= MAX_POINTS), STEPS[-1])
    return Window(now - seconds, now, float(bucket))


def totals(summary: Mapping[str, Any], span: float) -> dict[str, Any]:
    """The range's totals: the log's summary, with rates and what the traffic would have cost
    with no lever pulled (spend plus net savings)."""
    requests = int(summary.get("requests") or 0)
    errors = int(summary.get("errors") or 0)
    cost = float(summary.get("cost_usd") or 0.0)
    saved = float(summary.get("saved_usd") or 0.0)
    savings = summary.get("savings") or {}
    return {
        "requests": requests, "errors": errors,
        "request_rate": requests / span if span > 0 else 0.0,
        "error_rate": errors / requests if requests else None,
        "cost_usd": cost, "saved_usd": saved, "counterfactual_usd": cost + saved,
        "savings": {lever: float(savings.get(lever) or 0.0) for lever in LEVERS},
        **{k: int(summary.get(k) or 0) for k in ("input_tokens", "cached_tokens",
           "cache_write_tokens", "output_tokens", "expected_cached")},
    }  # fmt: skip


def series(rows: Iterable[Mapping[str, Any]], at: Window) -> dict[str, Any]:
    """The store's `series` rows on the window's whole grid: columns (uPlot's shape) of
    requests, their rate per second, errors, spend, net savings and each lever's savings."""
    starts = at.starts
    index = {round(t / at.bucket): i for i, t in enumerate(starts)}
    n = len(starts)
    columns: dict[str, list[float]] = {k: [0.0] * n for k in ("requests", "errors", "cost_usd",
                                                             "saved_usd")}  # fmt: skip
    levers = {lever: [0.0] * n for lever in LEVERS}
    for row in rows:
        i = index.get(round(float(row["ts"]) / at.bucket))
        if i is None:
            continue
        for key, column in columns.items():
            column[i] += float(row.get(key) or 0.0)
        for lever, value in (row.get("savings") or {}).items():
            if lever in levers:
                levers[lever][i] += float(value or 0.0)
    rate = [count / at.bucket for count in columns["requests"]]
    return {"ts": starts, **columns, "rate": rate, "savings": levers}


def _quantiles(values: Sequence[float]) -> dict[str, float | None]:
    """p50, p95, p99 by linear interpolation between closest ranks (as `levergate bench` and
    numpy do); none of no values."""
    if len(values) < 2:
        return {f"p{q:g}": values[0] if values else None for q in QUANTILES}
    cuts = statistics.quantiles(values, n=100, method="inclusive")  # cuts[k - 1]: the k-th
    return {f"p{q:g}": cuts[int(q) - 1] for q in QUANTILES}


def latency(samples: Sequence[Sequence[Any]], at: Window, *, sampled: bool) -> dict[str, Any]:
    """p50/p95/p99 of total time and TTFT (milliseconds) over the range and per bucket, from
    the store's `latencies` rows (ts, total_ms, ttft_ms)."""
    starts = at.starts
    index = {round(t / at.bucket): i for i, t in enumerate(starts)}
    per: dict[str, list[list[float]]] = {"total_ms": [[] for _ in starts],
                                         "ttft_ms": [[] for _ in starts]}  # fmt: skip
    for ts, total, ttft in samples:
        i = index.get(math.floor(float(ts) / at.bucket))
        if i is None:
            continue
        if total is not None:
            per["total_ms"][i].append(float(total))
        if ttft is not None:
            per["ttft_ms"][i].append(float(ttft))
    found: dict[str, Any] = {"sampled": sampled, "count": len(samples)}
    columns: dict[str, list[float | None]] = {}
    for name, buckets in per.items():
        found[name] = _quantiles([v for bucket in buckets for v in bucket])
        cuts = [_quantiles(bucket) for bucket in buckets]
        for q in QUANTILES:
            columns[f"{name.removesuffix('_ms')}_p{q:g}"] = [c[f"p{q:g}"] for c in cuts]
    found["series"] = {"ts": starts, **columns}
    return found


def caches(groups: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Hit rate by cache from the log's `groups(by="cache")` rows (`exact:hit`, `semantic:miss`,
    `exact:coalesced`...): a request counts once, under the cache that decided it."""
    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for group in groups:
        value = group.get("cache")
        if not value:
            continue
        name, _, outcome = str(value).partition(":")
        counts[name][outcome or "hit"] += int(group["requests"])
    found = []
    for name in sorted(counts):
        by = counts[name]
        lookups = sum(by.values())
        found.append({"cache": name, "lookups": lookups, "hits": by["hit"],
                      "coalesced": by["coalesced"], "misses": by["miss"],
                      "hit_rate": by["hit"] / lookups if lookups else None})  # fmt: skip
    return found
