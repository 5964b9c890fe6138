"""Exact percentiles: invariants under Hypothesis, and agreement with the standard library."""

from __future__ import annotations

import statistics
from array import array

import pytest
from hypothesis import given
from hypothesis import strategies as st

from levergate.bench.stats import mean, percentile, percentiles, summarize

samples = st.lists(
    st.floats(min_value=0.0, max_value=1e6, allow_nan=False, allow_infinity=False),
    min_size=1,
    max_size=300,
)
quantiles = st.floats(min_value=0.0, max_value=100.0)


@given(samples)
def test_reported_percentiles_are_ordered_and_within_the_range(values: list[float]) -> None:
    p50, p90, p95, p99 = percentiles(values, [50, 90, 95, 99])
    assert min(values) <= p50 <= p90 <= p95 <= p99 <= max(values)


@given(samples, quantiles, quantiles)
def test_percentile_is_monotone_in_q(values: list[float], a: float, b: float) -> None:
    ordered = sorted(values)
    low, high = sorted((a, b))
    assert percentile(ordered, low) <= percentile(ordered, high)


@given(samples)
def test_extremes_are_min_and_max(values: list[float]) -> None:
    ordered = sorted(values)
    assert percentile(ordered, 0) == ordered[0]
    assert percentile(ordered, 100) == ordered[-1]


@given(st.lists(st.integers(min_value=0, max_value=10_000), min_size=2, max_size=200))
def test_matches_statistics_quantiles_inclusive(values: list[int]) -> None:
    """Type 7 is what `statistics.quantiles(method="inclusive")` computes."""
    expected = statistics.quantiles(values, n=100, method="inclusive")
    ordered = sorted(float(v) for v in values)
    for q in (1, 25, 50, 90, 95, 99):
        assert percentile(ordered, q) == pytest.approx(expected[q - 1])


@given(samples)
def test_shuffling_does_not_change_percentiles(values: list[float]) -> None:
    assert percentiles(values, [50, 99]) == percentiles(list(reversed(values)), [50, 99])


def test_interpolates_between_closest_ranks() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([10.0], 99) == 10.0
    assert percentile([0.0, 100.0], 99) == pytest.approx(99.0)


def test_rejects_empty_and_out_of_range() -> None:
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def test_summary_is_in_milliseconds_and_empty_is_only_a_count() -> None:
    summary = summarize(array("d", [0.001, 0.002, 0.003]))
    assert summary["count"] == 3
    assert summary["min"] == pytest.approx(1.0)
    assert summary["p50"] == pytest.approx(2.0)
    assert summary["max"] == pytest.approx(3.0)
    assert summary["mean"] == pytest.approx(2.0)
    assert summarize(array("d")) == {"count": 0}
    assert mean([]) is None
