"""`levergate report`'s numbers and drawing, pure: from request-log records and bench results."""

from __future__ import annotations

import itertools
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from levergate.report.data import from_bench, from_records
from levergate.report.page import html, markdown
from levergate.report.svg import Line, lines, nice_ticks
from levergate.requestlog.row import as_dict, row_of
from tests.unit.requestlog.records import record


def records(count: int) -> list[dict[str, Any]]:
    return [{"seq": n, **as_dict(row_of(1_000_000.0 + 7 * n, record(n)))} for n in range(count)]


def test_a_report_of_records_adds_up() -> None:
    found = records(120)
    report = from_records(found, title="t", source="s")
    totals = report["totals"]
    assert totals["requests"] == 120
    assert totals["errors"] == sum(r["outcome"] != "ok" for r in found)
    assert totals["cost_usd"] == pytest.approx(sum(r["cost_usd"] for r in found))
    series = report["series"]["buckets"]
    assert sum(b["requests"] for b in series) == 120
    assert sum(b["cost_usd"] for b in series) == pytest.approx(totals["cost_usd"])
    cdf = report["cdf"]["total_ms"]
    assert [p[0] for p in cdf] == sorted(p[0] for p in cdf)
    assert cdf[-1][1] == 1.0
    assert sum(b[2] for b in report["ttft_histogram"]) == report["latency"]["ttft_ms"]["count"]
    exact = next(lv for lv in report["levers"] if lv["lever"] == "exact")
    assert exact["saved_usd"] == pytest.approx(0.002 * 40)
    assert exact["share"] == pytest.approx(exact["saved_usd"] / totals["counterfactual_usd"])
    assert sum(r["requests"] for r in report["routes"]) == 120
    assert {r["model"] for r in report["routes"]} == {"auto", "fast"}


def test_a_bench_result_with_or_without_samples() -> None:
    summary = {"count": 3, "min": 1.0, "p50": 2.0, "p90": 3.0, "p95": 3.0, "p99": 3.0, "max": 3.0}
    result = {"total_ms": summary, "ttft_ms": {"count": 0}, "ok": 3, "sent": 3, "errors": {},
              "achieved_rps": 1.0, "config": {"trace": "azure"}}  # fmt: skip
    plain = from_bench(result, title="b", source="s")
    assert [p[1] for p in plain["cdf"]["total_ms"]] == [0, 0.5, 0.9, 0.95, 0.99, 1.0]
    assert plain["ttft_histogram"] == []
    samples = {"total_ms": [1.0, 2.0, 3.0], "ttft_ms": [0.5, 0.7]}
    sampled = from_bench({**result, "samples": samples}, title="b", source="s")
    assert sampled["latency"]["ttft_ms"]["count"] == 2
    assert "<svg" in html(sampled)
    assert "bench:" in markdown(sampled)


@given(st.floats(-1e6, 1e6), st.floats(1e-3, 1e6))
def test_ticks_are_evenly_spaced_inside_the_range(low: float, width: float) -> None:
    high = low + width
    ticks = nice_ticks(low, high)
    assert ticks
    assert all(low - 1e-9 * abs(low) <= t <= high + 1e-6 * max(1.0, abs(high)) for t in ticks)
    steps = {round(b - a, 9) for a, b in itertools.pairwise(ticks)}
    assert len(steps) <= 1 or max(steps) - min(steps) <= 1e-6 * max(steps)


def test_text_from_the_log_is_escaped_and_nothing_is_fetched() -> None:
    found = records(10)
    found[0]["model"] = "<script>alert(1)</script>"
    page = html(from_records(found, title="<b>", source="s"))
    assert "<script>alert(1)" not in page
    assert "&lt;script&gt;" in page
    assert "src=" not in page
    assert "href=" not in page
    chart = lines([Line("a", [(1.0, 0.1), (10.0, 1.0)], step=True)], title="c", x_label="x",
                  y_label="y", x_log=True)  # fmt: skip
    assert chart.startswith("<svg")
    assert "H" in chart
    assert "no data" in lines([], title="c", x_label="x", y_label="y")
    assert not math.isnan(from_records(found, title="t", source="s")["totals"]["cost_usd"])
