"""Reading one Prometheus sample the way a scraper would: through the collector's public
`collect()`, never the private `._value` of a child (which prometheus_client may change, and
which reads a number no scrape would ever show).

    assert sample_value(stats.faults, "redis", "get", "timeout") == 2

Label values are given in the metric's label order, as `.labels(...)` takes them. A label set
never touched reads 0.0: prometheus_client creates the child (at zero) only when first
labelled, and a scrape shows it only from then on; a counter that was never counted is zero.
Label values of the wrong number are an error, so a typo cannot pass as a zero.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from prometheus_client.metrics_core import Metric

__all__ = ["sample_value"]


class Collected(Protocol):
    """What `Counter`, `Gauge`, `Histogram` and a `CollectorRegistry` all have."""

    def collect(self) -> Iterable[Metric]: ...


def sample_value(metric: Collected, *labels: str, suffix: str | None = None) -> float:
    """The value of the sample of `metric` with these label values.

    `suffix` picks among a family's samples: by default the counter's `_total` or the gauge's
    own value; `"_count"`, `"_sum"` or `"_bucket"` for a histogram (`"_bucket"` needs the `le`
    label last). A metric registered under no label names takes no labels."""
    for family in metric.collect():
        names = {family.name, family.name + "_total"} if suffix is None else {family.name + suffix}
        for sample in family.samples:
            if sample.name not in names:
                continue
            if len(sample.labels) != len(labels):
                raise ValueError(
                    f"{family.name} is labelled by {tuple(sample.labels)}, not {labels}"
                )
            if tuple(sample.labels.values()) == labels:
                return float(sample.value)
    return 0.0
