"""What a report shows, computed once from its input: request-log records (`levergate log
export`'s shape, requestlog/row.py) or a `levergate bench` result. Pure functions; the result is
a plain JSON-able dict that the HTML page inlines and the markdown summary reads.

Latency percentiles are exact (bench/stats.py's method) over every record; a CDF is drawn from
at most `CDF_POINTS` of its quantiles, a histogram from log-spaced bins. Money is the ledger's
(record by record, as `/metrics` counts it): `counterfactual_usd` is spend plus net savings,
what the same traffic would have cost with no lever pulled.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from levergate.bench.stats import percentile
from levergate.policies.pricing import Lever

__all__ = ["CAVEATS", "from_bench", "from_records"]

CDF_POINTS = 200
HISTOGRAM_BINS = 24
MAX_BUCKETS = 120
TABLE_ROWS = 25
QUANTILES = (50.0, 90.0, 95.0, 99.0)
# What each lever's saving may cost in answer quality, and where that is measured.
CAVEATS: dict[str, str] = {
    Lever.EXACT: "Identical requests only (temperature 0 or a seed unless a route caches "
    "sampled answers): the answer is the one the model gave; stale only within its TTL.",
    Lever.SEMANTIC: "A different question may get a cached answer: false hits measured offline "
    "at 0-0.37% on four paraphrase sets (threshold 0.95, every guard; "
    "benchmarks/results/cache_semantic_eval.md); not measured live.",
    Lever.EMBEDDINGS: "The same input's vector, cached: no quality effect.",
    Lever.COALESCED: "Identical requests in flight at once share one answer: as the exact cache.",
    Lever.ROUTE: "A cheaper model answered: quality kept is measured live by shadow samples "
    "(levergate_route_quality_retention, levergate_cascade_quality_retention) and offline by "
    "`levergate router eval` (47.7% saved at 95% of quality on MMLU labels, routing.md).",
    Lever.TRIM: "History dropped to fit a budget may change the answer; answer quality is not "
    "measured (trim.md measures tokens only).",
    Lever.PROMPT_CACHE: "The provider's prompt cache: the same tokens are read, no quality "
    "effect; negative while cache writes are not yet read back.",
    Lever.BATCH: "The provider's batch discount: the same model, answered later.",
    Lever.TIER: "The same model at another service tier: flex is slower (chosen only when the "
    "deadline allows), priority faster and dearer (a negative saving); the answers are the "
    "model's own. Deadline misses are in the request log's outcomes (tiers.md).",
}


def _quantiles(values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {"count": 0}
    ordered = sorted(values)
    found = {"count": len(ordered), "mean": math.fsum(ordered) / len(ordered)}
    found |= {f"p{q:g}": percentile(ordered, q) for q in QUANTILES}
    return found | {"max": ordered[-1]}


def _cdf(values: Sequence[float]) -> list[list[float]]:
    """(value, share of requests at or below it) at up to `CDF_POINTS` quantiles."""
    if not values:
        return []
    ordered = sorted(values)
    n = len(ordered)
    steps = min(n, CDF_POINTS)
    return [
        [ordered[min(n - 1, round(i * (n - 1) / max(1, steps - 1)))], (i + 1) / steps]
        for i in range(steps)
    ]


def _histogram(values: Sequence[float]) -> list[list[float]]:
    """(low, high, count) over log-spaced bins from the smallest to the largest value."""
    positive = [v for v in values if v > 0]
    if not positive:
        return []
    low, high = min(positive), max(positive)
    if high <= low * 1.0001:
        return [[low, high, float(len(positive))]]
    edges = [low * (high / low) ** (i / HISTOGRAM_BINS) for i in range(HISTOGRAM_BINS + 1)]
    counts = [0] * HISTOGRAM_BINS
    ratio = math.log(high / low)
    for v in positive:
        counts[min(HISTOGRAM_BINS - 1, int(math.log(v / low) / ratio * HISTOGRAM_BINS))] += 1
    return [[edges[i], edges[i + 1], float(counts[i])] for i in range(HISTOGRAM_BINS)]


def _bucket_seconds(span: float) -> float:
    for step in (1, 5, 10, 30, 60, 300, 600, 1800, 3600, 6 * 3600, 86400):
        if span / step <= MAX_BUCKETS:
            return float(step)
    return float(math.ceil(span / MAX_BUCKETS / 86400) * 86400)


def _series(records: Sequence[Mapping[str, Any]], first: float, last: float) -> dict[str, Any]:
    step = _bucket_seconds(max(1.0, last - first))
    start = math.floor(first / step) * step
    count = int((last - start) // step) + 1
    rows = [
        {"ts": start + i * step, "requests": 0, "errors": 0, "cost_usd": 0.0, "saved_usd": 0.0}
        for i in range(count)
    ]
    for r in records:
        row = rows[min(count - 1, int((r["ts"] - start) // step))]
        row["requests"] += 1
        row["errors"] += r["outcome"] != "ok"
        row["cost_usd"] += r["cost_usd"] or 0.0
        row["saved_usd"] += r["saved_usd"] or 0.0
    return {"bucket_seconds": step, "buckets": rows}


def _table(records: Iterable[Mapping[str, Any]], key: str) -> list[dict[str, Any]]:
    groups: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for r in records:
        name = r.get(key) or ("(cache)" if key == "alias" and r.get("cache") else "(none)")
        groups[str(name)].append(r)
    rows = []
    for name, found in groups.items():
        totals = [r["total_ms"] for r in found if r["total_ms"] is not None]
        ttfts = [r["ttft_ms"] for r in found if r.get("ttft_ms") is not None]
        rows.append(
            {
                key: name,
                "requests": len(found),
                "errors": sum(r["outcome"] != "ok" for r in found),
                "total_p50_ms": _at(totals, 50),
                "total_p95_ms": _at(totals, 95),
                "ttft_p50_ms": _at(ttfts, 50),
                "input_tokens": sum(_prompt(r) for r in found),
                "output_tokens": sum(r["output_tokens"] or 0 for r in found),
                "cost_usd": math.fsum(r["cost_usd"] or 0.0 for r in found),
                "saved_usd": math.fsum(r["saved_usd"] or 0.0 for r in found),
            }
        )
    rows.sort(key=lambda row: (-row["requests"], row[key]))
    return rows[:TABLE_ROWS]


def _at(values: Sequence[float], q: float) -> float | None:
    return percentile(sorted(values), q) if values else None


def _prompt(r: Mapping[str, Any]) -> int:
    return int(
        (r["input_tokens"] or 0) + (r["cached_tokens"] or 0) + (r["cache_write_tokens"] or 0)
    )


def _levers(records: Sequence[Mapping[str, Any]], cost: float) -> list[dict[str, Any]]:
    saved: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for r in records:
        for lever, usd in (r.get("savings") or {}).items():
            saved[lever] += usd
            counts[lever] += 1
    counterfactual = cost + math.fsum(saved.values())
    return [
        {
            "lever": str(lever),
            "saved_usd": saved.get(lever, 0.0),
            "requests": counts.get(lever, 0),
            "share": saved.get(lever, 0.0) / counterfactual if counterfactual > 0 else 0.0,
            "caveat": CAVEATS[lever],
        }
        for lever in Lever
    ]


def from_records(
    records: Sequence[Mapping[str, Any]],
    *,
    title: str,
    source: str,
    quality: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """The report of request-log records (any order)."""
    records = sorted(records, key=lambda r: r["ts"])
    first, last = records[0]["ts"], records[-1]["ts"]
    totals = [r["total_ms"] for r in records if r["total_ms"] is not None]
    ttfts = [r["ttft_ms"] for r in records if r.get("ttft_ms") is not None]
    cost = math.fsum(r["cost_usd"] or 0.0 for r in records)
    saved = math.fsum(r["saved_usd"] or 0.0 for r in records)
    return {
        "title": title,
        "source": source,
        "kind": "log",
        "generated_at": time.time(),
        "first_ts": first,
        "last_ts": last,
        "totals": {
            "requests": len(records),
            "errors": sum(r["outcome"] != "ok" for r in records),
            "cost_usd": cost,
            "saved_usd": saved,
            "counterfactual_usd": cost + saved,
            "input_tokens": sum(_prompt(r) for r in records),
            "cached_tokens": sum(r["cached_tokens"] or 0 for r in records),
            "output_tokens": sum(r["output_tokens"] or 0 for r in records),
            "cache_hits": sum(1 for r in records if (r.get("cache") or "").endswith(":hit")),
        },
        "latency": {
            "total_ms": _quantiles(totals),
            "ttft_ms": _quantiles(ttfts),
            "queued_ms": _quantiles([r.get("queued_ms") or 0.0 for r in records]),
        },
        "cdf": {"total_ms": _cdf(totals), "ttft_ms": _cdf(ttfts)},
        "ttft_histogram": _histogram(ttfts),
        "series": _series(records, first, last),
        "levers": _levers(records, cost),
        "routes": _table(records, "model"),
        "models": _table(records, "alias"),
        "outcomes": _counts(r["outcome"] for r in records),
        "quality": dict(quality or {}),
    }


def _counts(values: Iterable[str]) -> dict[str, int]:
    found: dict[str, int] = defaultdict(int)
    for value in values:
        found[value] += 1
    return dict(sorted(found.items(), key=lambda kv: -kv[1]))


BENCH_FIELDS = ("mode", "target_rps", "achieved_rps", "throughput_rps", "elapsed_s", "sent",
                "ok", "errors", "late", "dropped")  # fmt: skip
BENCH_CONFIG = ("url", "trace", "time_scale", "model", "stream", "concurrency", "rate",
                "repeat_rate")  # fmt: skip
SUMMARY_POINTS = (("min", 0), ("p50", 50), ("p90", 90), ("p95", 95), ("p99", 99), ("max", 100))


def from_bench(result: Mapping[str, Any], *, title: str, source: str) -> dict[str, Any]:
    """The report of a `levergate bench` result: latencies only (a bench sees no money). With
    `--samples` the CDFs and the histogram are drawn from every request; without, the CDFs from
    the result's percentiles."""
    samples = result.get("samples") or {}
    latency, cdf = {}, {}
    for name in ("total_ms", "ttft_ms"):
        values = samples.get(name)
        if values:
            latency[name], cdf[name] = _quantiles(values), _cdf(values)
        else:
            summary = latency[name] = result.get(name) or {}
            cdf[name] = [[summary[k], q / 100] for k, q in SUMMARY_POINTS if k in summary]
    config = result.get("config") or {}
    return {
        "title": title,
        "source": source,
        "kind": "bench",
        "generated_at": time.time(),
        "bench": {k: result.get(k) for k in BENCH_FIELDS},
        "config": {k: config.get(k) for k in BENCH_CONFIG},
        "latency": latency,
        "cdf": cdf,
        "ttft_histogram": _histogram(samples.get("ttft_ms") or []),
        "warnings": list(result.get("warnings") or []),
    }
