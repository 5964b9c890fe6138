"""`layers.measure.hot`: updates through its handles expose exactly what prometheus_client's own
`inc` and `observe` do, refuse what they refuse, and leave values that are not a plain lock-guarded
float of this process (a multi-process worker's files) on prometheus_client's own path."""

from __future__ import annotations

import math
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from levergate.layers.measure import hot

BUCKETS = (0.001, 0.01, 0.1, 1.0, 10.0)
AMOUNTS = (0.0, 0.001, 0.0005, 0.05, 0.1, 7.0, 10.0, 11.0, math.inf, -1.0, math.nan, 0.01)


def _metrics(registry: CollectorRegistry) -> tuple[Counter, Gauge, Histogram]:
    return (
        Counter("lg_requests", "Requests.", ("route",), registry=registry),
        Gauge("lg_in_flight", "In flight.", registry=registry),
        Histogram("lg_seconds", "Seconds.", ("route",), buckets=BUCKETS, registry=registry),
    )


def _exposed(registry: CollectorRegistry) -> list[str]:
    """The exposition without its `_created` timestamps (the two registries differ there)."""
    lines = generate_latest(registry).decode().splitlines()
    return [line for line in lines if "_created" not in line]


def test_the_handles_expose_what_the_public_api_does() -> None:
    public, fast = CollectorRegistry(), CollectorRegistry()
    counter, gauge, histogram = _metrics(public)
    fast_counter, fast_gauge, fast_histogram = _metrics(fast)
    adds = hot.counter(fast_counter.labels("chat"))
    serving = hot.gauge(fast_gauge)
    observes = hot.histogram(fast_histogram.labels("chat"))
    for amount in AMOUNTS:
        histogram.labels("chat").observe(amount)
        observes.observe(amount)
        if amount >= 0 and not math.isnan(amount) and not math.isinf(amount):
            counter.labels("chat").inc(amount)
            adds.inc(amount)
        gauge.inc()
        serving.inc(1)
    gauge.dec()
    serving.inc(-1)
    assert _exposed(fast) == _exposed(public)
    # The children still take prometheus_client's own calls, onto the same values.
    fast_counter.labels("chat").inc(2)
    counter.labels("chat").inc(2)
    fast_histogram.labels("chat").observe(0.5)
    histogram.labels("chat").observe(0.5)
    assert _exposed(fast) == _exposed(public)


def test_a_counter_handle_refuses_a_negative_amount_as_the_counter_does() -> None:
    counter = Counter("lg_tokens", "Tokens.", ("kind",), registry=CollectorRegistry())
    adds = hot.counter(counter.labels("input"))
    with pytest.raises(ValueError, match="non-negative"):
        counter.labels("input").inc(-1)
    with pytest.raises(ValueError, match="non-negative"):
        adds.inc(-1)


def test_a_child_handed_twice_shares_its_values() -> None:
    registry = CollectorRegistry()
    counter, _, histogram = _metrics(registry)
    first, second = hot.counter(counter.labels("a")), hot.counter(counter.labels("a"))
    first.inc(1)
    second.inc(2)
    hot.histogram(histogram.labels("a")).observe(0.5)
    hot.histogram(histogram.labels("a")).observe(0.5)
    assert registry.get_sample_value("lg_requests_total", {"route": "a"}) == 3
    assert registry.get_sample_value("lg_seconds_count", {"route": "a"}) == 2
    assert registry.get_sample_value("lg_seconds_bucket", {"route": "a", "le": "1.0"}) == 2


class _Shared:
    """A value some other process reads (as prometheus_client's memory-mapped one is)."""

    _multiprocess = True

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float) -> None:
        self.value += amount

    def get(self) -> float:
        return self.value

    def get_exemplar(self) -> Any:
        return None


def test_values_that_are_not_this_process_s_own_stay_on_the_slow_path() -> None:
    registry = CollectorRegistry()
    counter, gauge, histogram = _metrics(registry)
    child = counter.labels("a")
    shared = child._value = _Shared()
    assert hot.counter(child) is child
    assert child._value is shared
    gauge._value = _Shared()
    assert hot.gauge(gauge) is gauge
    h = histogram.labels("a")
    h._sum = _Shared()
    assert hot.histogram(h) is h
    child.inc(2)
    assert shared.value == 2
