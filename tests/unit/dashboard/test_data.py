"""The dashboard's numbers from the log's query results (dashboard/data.py) and from the
gateway's registry (dashboard/metrics.py): ranges are bounded and cut into a bounded grid, every
row lands in its bucket, percentiles and hit rates are what the rows say."""

from __future__ import annotations

import itertools
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from levergate.dashboard import data, metrics
from levergate.errors import BadRequest
from levergate.layers.shadow import AGREE, DISAGREE, ShadowMeter
from levergate.layers.traffic.metrics import TrafficMetrics

NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    "text", ["4m", "299s", "8d", "169h", "0m", "1h30m", "-1h", "1x", "", "9" * 17]
)
def test_a_range_outside_5_minutes_to_7_days_or_not_a_duration_is_a_400(text: str) -> None:
    with pytest.raises(BadRequest) as refused:
        data.window(text, now=NOW)
    assert refused.value.param == "range"


@given(seconds=st.integers(min_value=300, max_value=7 * 86400))
def test_every_range_is_a_bounded_grid_covering_it(seconds: int) -> None:
    at = data.window(f"{seconds}s", now=NOW)
    starts = at.starts
    assert at.until - at.since == seconds
    assert len(starts) <= data.MAX_POINTS + 2
    assert starts[0] <= at.since < starts[0] + at.bucket
    assert starts[-1] <= at.until < starts[-1] + at.bucket
    assert all(b - a == at.bucket for a, b in itertools.pairwise(starts))


def test_series_puts_each_row_in_its_bucket_and_fills_the_rest_with_zeros() -> None:
    at = data.window("5m", now=NOW)  # 5 s buckets
    first, third = at.starts[0], at.starts[2]
    rows: list[dict[str, Any]] = [
        {"ts": first, "requests": 2, "errors": 1, "cost_usd": 0.5, "saved_usd": 0.25,
         "savings": {"exact": 0.25}},
        {"ts": third, "requests": 3, "errors": 0, "cost_usd": 1.0, "saved_usd": -0.1,
         "savings": {"trim": -0.1}},
        {"ts": first - 3600, "requests": 99},
    ]  # fmt: skip
    found = data.series(rows, at)
    assert found["ts"] == at.starts
    assert found["requests"][:4] == [2, 0, 3, 0]
    assert sum(found["requests"]) == 5  # the row outside the range is not drawn
    assert found["rate"][2] == 3 / at.bucket
    assert found["savings"]["exact"][0] == 0.25
    assert found["savings"]["trim"][2] == -0.1
    assert set(found["savings"]) == set(data.LEVERS)


def test_latency_percentiles_over_the_range_and_per_bucket() -> None:
    at = data.window("5m", now=NOW)
    start = at.starts[1]
    samples = [(start + 0.1 * i, float(i), None if i % 2 else float(i) / 10) for i in range(1, 101)]
    found = data.latency(samples, at, sampled=False)
    assert found["total_ms"]["p50"] == pytest.approx(50.5)
    assert found["total_ms"]["p99"] == pytest.approx(99.01)
    assert found["ttft_ms"]["p50"] == pytest.approx(5.1)  # the even i's, tenths
    series = found["series"]
    assert series["total_p50"][0] is None  # no request in that bucket: no number
    assert series["total_p95"][1] is not None
    empty = data.latency([], at, sampled=False)
    assert empty["total_ms"] == {"p50": None, "p95": None, "p99": None}
    assert all(v is None for v in empty["series"]["ttft_p99"])


def test_hit_rate_by_cache_counts_each_request_under_the_cache_that_decided_it() -> None:
    groups: list[dict[str, Any]] = [
        {"cache": "exact:hit", "requests": 3}, {"cache": "exact:miss", "requests": 6},
        {"cache": "exact:coalesced", "requests": 1}, {"cache": "semantic:hit", "requests": 2},
        {"cache": None, "requests": 40},
    ]  # fmt: skip
    found = {c["cache"]: c for c in data.caches(groups)}
    assert found["exact"] == {"cache": "exact", "lookups": 10, "hits": 3, "coalesced": 1,
                              "misses": 6, "hit_rate": 0.3}  # fmt: skip
    assert found["semantic"]["hit_rate"] == 1.0
    assert data.caches([]) == []


def test_totals_add_the_counterfactual_and_rates() -> None:
    found = data.totals({"requests": 10, "errors": 2, "cost_usd": 1.5, "saved_usd": 0.5,
                         "savings": {"exact": 0.5}}, 100.0)  # fmt: skip
    assert found["counterfactual_usd"] == 2.0
    assert found["request_rate"] == 0.1
    assert found["error_rate"] == 0.2
    assert data.totals({}, 300.0)["error_rate"] is None


def test_quality_and_endpoints_are_read_from_the_registry() -> None:
    registry = CollectorRegistry()
    route = ShadowMeter(registry, layer="route", shadow_help="s", retention_help="r")
    for result in (AGREE, AGREE, AGREE, DISAGREE):
        route.answered("support", cheap=True)
        route.shadowed("support", result)
    traffic = TrafficMetrics(registry)
    traffic.ejections.labels("sim").inc()
    traffic.attempts.labels("sim", "ok").inc(7)
    found = metrics.read(metrics.collect(registry))
    [quality] = found["quality"]
    assert (quality["kind"], quality["name"], quality["compared"]) == ("route", "support", 4)
    assert 0 < quality["retention"] < 1
    [endpoint] = found["endpoints"]
    assert endpoint["endpoint"] == "sim"
    assert endpoint["ejections"] == 1
    assert endpoint["attempts"] == {"ok": 7}
    assert found["queue"]["in_flight"] == 0
    assert math.isclose(found["queue"]["queued"], 0)
