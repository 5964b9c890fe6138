"""deploy/grafana/levergate.json asks Prometheus only for series levergate really exports: a
real gateway serves mixed traffic (a cache miss then a hit, a stream), its /metrics is scraped,
and every metric any panel's query names must be among the scraped series. The same scrape is
held to Prometheus' naming conventions (issue 23 §5): base units in names, `_total` on counters,
no unit-less or millisecond durations."""

from __future__ import annotations

import re

import httpx
import orjson
from prometheus_client.parser import text_string_to_metric_families

from levergate.config import Settings
from levergate.gateway import Gateway
from levergate.server.run import serving
from levergate.simulator import SimSettings, run_simulator
from tests.packaging.files import DASHBOARD

PROMETHEUS_OWN = frozenset({"up"})  # series Prometheus writes itself for each target


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (functions, aggregations, label names,
    matchers, ranges and numbers left out)."""
    expr = re.sub(r'"[^"]*"', "", expr)
    expr = re.sub(r"\{[^}]*\}|\[[^\]]*\]", "", expr)
    expr = re.sub(r"\b(by|without)\s*\([^)]*\)", "", expr)
    words = re.findall(r"\b([a-zA-Z_:][\w:]*)\b(?!\s*\()", expr)
    return {w for w in words if w not in {"by", "without", "offset", "bool", "on", "ignoring"}}


def queries() -> list[str]:
    dashboard = orjson.loads(DASHBOARD.read_bytes())
    return [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]


def test_the_query_parser_finds_metric_names() -> None:
    expr = ('histogram_quantile(0.95, sum by (le) (rate(levergate_ttft_seconds_bucket'
            '{job="levergate"}[$__rate_interval]))) / clamp_min(up, 1e-9)')  # fmt: skip
    assert metric_names(expr) == {"levergate_ttft_seconds_bucket", "up"}


async def scrape() -> str:
    """/metrics after mixed traffic: a cache miss, a hit that saves dollars, a stream."""
    async with run_simulator(SimSettings(port=0)) as sim:
        settings = Settings.for_upstream(sim.base_url, server={"port": 0})
        async with (
            Gateway(settings) as gateway,
            serving(gateway) as url,
            httpx.AsyncClient(base_url=url.removesuffix("/v1"), timeout=30) as client,
        ):
            body = {"model": "gpt-4o-mini", "temperature": 0,
                    "messages": [{"role": "user", "content": "Hello dashboard"}]}  # fmt: skip
            for _ in range(2):  # a miss, then a hit that saves dollars
                assert (await client.post("/v1/chat/completions", json=body)).status_code == 200
            stream = {**body, "stream": True, "messages": [{"role": "user", "content": "Hi"}]}
            async with client.stream("POST", "/v1/chat/completions", json=stream) as reply:
                assert reply.status_code == 200
                await reply.aread()
            return (await client.get("/metrics")).text


async def test_every_panel_queries_series_levergate_exports() -> None:
    scraped = await scrape()
    exported = {
        sample.name
        for family in text_string_to_metric_families(scraped)
        for sample in family.samples
    }
    named = set().union(*(metric_names(q) for q in queries()))
    assert len(named) >= 10
    missing = sorted(named - exported - PROMETHEUS_OWN)
    assert not missing, f"the dashboard queries series /metrics does not have: {missing}"


TIMELIKE = re.compile(r"latency|duration|_time|wait|ttft|overhead|elapsed|_age\b")
NOT_BASE = re.compile(r"_(ms|millis|milliseconds|us|microseconds|minutes|hours|kb|mb|kib|mib)\b")


def convention_breaks(families: list[tuple[str, str, list[str]]]) -> list[str]:
    """What breaks Prometheus' naming conventions in (family name, type, sample names)."""
    broken = []
    for name, kind, samples in families:
        if NOT_BASE.search(name):
            broken.append(f"{name}: not a base unit (seconds, bytes)")
        if TIMELIKE.search(name) and kind in ("histogram", "summary", "gauge") \
                and not name.endswith("_seconds"):  # fmt: skip
            broken.append(f"{name}: a duration without _seconds")
        if kind == "counter" and any(not s.endswith(("_total", "_created")) for s in samples):
            broken.append(f"{name}: a counter without _total")
        if "bytes" in name and not name.endswith("_bytes"):
            broken.append(f"{name}: bytes not at the end")
    return broken


def test_the_convention_check_finds_what_breaks_them() -> None:
    assert convention_breaks([("levergate_latency_ms", "histogram", [])]) == [
        "levergate_latency_ms: not a base unit (seconds, bytes)",
        "levergate_latency_ms: a duration without _seconds",
    ]
    assert convention_breaks([("levergate_hits", "counter", ["levergate_hits"])])
    assert not convention_breaks([("levergate_ttft_seconds", "histogram", ["x_bucket"])])


async def test_metrics_follow_prometheus_naming_conventions() -> None:
    families = [
        (f.name, f.type, [s.name for s in f.samples])
        for f in text_string_to_metric_families(await scrape())
        # prometheus_client's creation times (`<counter>_created`) parse as gauges of their own
        if f.name.startswith("levergate_") and not f.name.endswith("_created")
    ]
    assert len(families) >= 10
    assert not convention_breaks(families)
