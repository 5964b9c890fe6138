"""What the dashboard reads of the gateway's own metrics (its Prometheus registry, the one
`/metrics` exposes): the state of now, which the request log does not hold — quality retention
from shadow samples, endpoint health, ejections, queue depth, quota headroom, what is in
flight, what limits shed, and the provider prompt cache's expected and actual tokens since
start.

Only the families named in `SAMPLES` are collected (`restricted_registry`), never the
latency histograms that make a whole scrape megabytes; `read` turns them into plain rows.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric

__all__ = ["SAMPLES", "collect", "read"]

RETENTION = ("route", "cascade", "router")
ENDPOINT = ("outstanding", "queued", "quota_headroom_ratio", "up")
PROMPT_CACHE = ("prompt", "read", "write", "expected")
SAMPLES = (
    *(f"levergate_{kind}_quality_retention" for kind in RETENTION),
    *(f"levergate_{kind}_shadow_total" for kind in ("route", "cascade")),
    *(f"levergate_endpoint_{name}" for name in ENDPOINT),
    "levergate_ejected",
    "levergate_ejections_total",
    "levergate_upstream_attempts_total",
    "levergate_in_flight",
    "levergate_tenant_queued",
    "levergate_shed_total",
    "levergate_request_log_queued",
    "levergate_request_log_dropped_total",
    *(f"levergate_prompt_cache_{name}_tokens_total" for name in PROMPT_CACHE),
)


def collect(registry: CollectorRegistry) -> list[Metric]:
    """The families of `SAMPLES` (run it off the event loop, as `/metrics` does)."""
    return list(registry.restricted_registry(SAMPLES).collect())


Rows = dict[str, list[tuple[dict[str, str], float]]]


def _rows(families: Iterable[Metric]) -> Rows:
    rows: Rows = defaultdict(list)
    for family in families:
        for sample in family.samples:
            if sample.name in SAMPLES:
                rows[sample.name].append((sample.labels, float(sample.value)))
    return rows


def read(families: Iterable[Metric]) -> dict[str, Any]:
    """The collected families as the dashboard's rows."""
    rows = _rows(families)
    return {
        "quality": _quality(rows),
        "endpoints": _endpoints(rows),
        "queue": _queue(rows),
        "prompt_cache": _prompt_cache(rows),
    }


def _total(rows: Rows, name: str) -> float:
    return sum(value for _, value in rows.get(name, ()))


def _quality(rows: Rows) -> list[dict[str, Any]]:
    """Each route's, cascade's and learned router's quality retention: live from shadow samples
    (route, cascade), or measured offline on the router file (router)."""
    found = []
    for kind in RETENTION:
        samples: dict[str, float] = defaultdict(float)
        for labels, value in rows.get(f"levergate_{kind}_shadow_total", ()):
            if labels.get("result") in ("agree", "disagree"):
                samples[labels.get(kind, "")] += value
        for labels, value in rows.get(f"levergate_{kind}_quality_retention", ()):
            name = labels.get(kind) or next(iter(labels.values()), "")
            found.append({"kind": kind, "name": name, "retention": value,
                          "compared": samples.get(name) if kind != "router" else None})  # fmt: skip
    return sorted(found, key=lambda q: (q["kind"], q["name"]))


def _endpoints(rows: Rows) -> list[dict[str, Any]]:
    """Per endpoint key: serving or not, in flight, queued, quota left, ejections, attempts."""
    found: dict[str, dict[str, Any]] = defaultdict(lambda: {"attempts": {}})
    for name in ENDPOINT:
        for labels, value in rows.get(f"levergate_endpoint_{name}", ()):
            found[labels["endpoint"]][name] = value
    for labels, value in rows.get("levergate_ejections_total", ()):
        found[labels["endpoint"]]["ejections"] = value
    for labels, value in rows.get("levergate_ejected", ()):
        found[labels["endpoint"]]["ejected"] = value
    for labels, value in rows.get("levergate_upstream_attempts_total", ()):
        if value:  # the outcomes are counted from zero before the first attempt
            found[labels["endpoint"]]["attempts"][labels["outcome"]] = value
    return [{"endpoint": name, "up": None, "outstanding": 0.0, "queued": 0.0,
             "quota_headroom_ratio": None, "ejections": 0.0, "ejected": 0.0, **values}
            for name, values in sorted(found.items())]  # fmt: skip


def _queue(rows: Rows) -> dict[str, Any]:
    shed = [{**labels, "requests": value}
            for labels, value in rows.get("levergate_shed_total", ()) if value]  # fmt: skip
    return {
        "in_flight": _total(rows, "levergate_in_flight"),
        "queued": _total(rows, "levergate_endpoint_queued"),
        "tenant_queued": _total(rows, "levergate_tenant_queued"),
        "shed": sorted(shed, key=lambda s: -s["requests"]),
        "log_queued": _total(rows, "levergate_request_log_queued"),
        "log_dropped": _total(rows, "levergate_request_log_dropped_total"),
    }


def _prompt_cache(rows: Rows) -> list[dict[str, Any]]:
    """Per model since start: prompt tokens, those the provider read from its cache, wrote to
    it, and those the optimizer expected it to read."""
    found: dict[str, dict[str, float]] = defaultdict(lambda: dict.fromkeys(PROMPT_CACHE, 0.0))
    for name in PROMPT_CACHE:
        for labels, value in rows.get(f"levergate_prompt_cache_{name}_tokens_total", ()):
            found[labels.get("model", "")][name] += value
    return [{"model": model, **values} for model, values in sorted(found.items())]
