"""`sample_value` reads what a scrape of the registry would show, through public API only."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from levergate.testing import sample_value


def scraped(registry: CollectorRegistry, name: str, labels: dict[str, str]) -> float:
    text = generate_latest(registry).decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return float(sample.value)
    raise LookupError(name)


def test_a_counter_reads_as_its_scrape() -> None:
    registry = CollectorRegistry()
    faults = Counter("faults", "f", ["store", "op"], registry=registry)
    faults.labels("redis", "get").inc(2)
    faults.labels("redis", "set").inc()
    assert sample_value(faults, "redis", "get") == 2
    assert sample_value(faults, "redis", "set") == 1
    assert sample_value(faults, "redis", "get") == scraped(
        registry, "faults_total", {"store": "redis", "op": "get"}
    )
    # Through the registry too: the same public `collect()`.
    assert sample_value(registry, "redis", "set", suffix="_total") == 1


def test_an_untouched_label_set_is_zero_but_a_wrong_label_count_is_an_error() -> None:
    faults = Counter("faults", "f", ["store", "op"], registry=CollectorRegistry())
    assert sample_value(faults, "redis", "get") == 0
    faults.labels("redis", "get").inc()
    with pytest.raises(ValueError, match="labelled by"):
        sample_value(faults, "redis")


def test_gauges_unlabelled_metrics_and_histograms() -> None:
    registry = CollectorRegistry()
    ejected = Gauge("ejected", "e", ["endpoint"], registry=registry)
    ejected.labels("a").set(1)
    ejected.labels("a").dec()
    failovers = Counter("failovers", "f", registry=registry)
    failovers.inc(3)
    waits = Histogram("wait_seconds", "w", buckets=(0.1, 1.0), registry=registry)
    waits.observe(0.05)
    waits.observe(0.5)
    assert sample_value(ejected, "a") == 0
    assert sample_value(failovers) == 3
    assert sample_value(waits, suffix="_count") == 2
    assert sample_value(waits, suffix="_sum") == pytest.approx(0.55)
    assert sample_value(waits, "0.1", suffix="_bucket") == 1
