"""Report rendering: JSON round-trips, the markdown table, rates and warnings."""

from __future__ import annotations

import io

import orjson
import pytest

from levergate.bench import BenchConfig, BenchResult, Outcome, Snapshot, markdown_table
from levergate.bench.recorder import Recorder
from levergate.bench.report import RunTotals
from levergate.cli.bench import ProgressLine
from levergate.cli.output import Progress

URL = "http://127.0.0.1:9"


def outcome(*, end: float, first: float | None = None, itls: list[float] | None = None) -> Outcome:
    result = Outcome(end_at=end)
    result.first_token_at = first
    result.itls = itls or []
    result.output_tokens = 1 + len(result.itls)
    result.prompt_tokens = 100
    return result


def sample_result(*, stream: bool = True) -> BenchResult:
    config = BenchConfig(url=URL, rate=10.0, requests=4, stream=stream)
    recorder = Recorder(late_after_s=0.01)
    for i in range(3):
        start = i * 0.1
        recorder.launched(intended=start, sent=start, repeated=False)
        first = start + 0.05 if stream else None
        itls = [0.01, 0.02] if stream else []
        recorder.finished(
            outcome(end=start + 0.2, first=first, itls=itls), intended=start, sent=start
        )
    recorder.launched(intended=0.3, sent=0.35, repeated=True)
    recorder.finished(Outcome(end_at=0.4, status=429, error="http_429"), intended=0.3, sent=0.35)
    totals = RunTotals(start=0.0, end=1.0, cpu_s=0.002, planned=4, last_offset_s=0.3)
    return BenchResult.build(config=config, recorder=recorder, totals=totals, nonce="abc")


def test_counts_rates_and_latencies() -> None:
    result = sample_result()
    assert (result.sent, result.completed, result.ok) == (4, 4, 3)
    assert result.errors == {"http_429": 1}
    assert result.late == 1
    assert result.repeats == 1
    assert result.target_rps == 10.0
    assert result.achieved_rps == pytest.approx(3 / 0.35)
    assert result.throughput_rps == pytest.approx(3.0)
    assert result.ttft_ms["p50"] == pytest.approx(50.0)
    assert result.total_ms["p99"] == pytest.approx(200.0)
    assert result.itl_ms["count"] == 6
    assert result.mean_output_tokens == 3.0
    assert result.client_cpu_ms_per_request == pytest.approx(0.5)
    assert any("late" in w for w in result.warnings)


def test_json_carries_every_field_and_no_secret() -> None:
    config = BenchConfig(url=URL, api_key=None, headers=(("X-Key", "secret-value"),))
    assert "secret-value" not in orjson.dumps(config.describe()).decode()
    data = orjson.loads(sample_result().to_json())
    assert data["errors"] == {"http_429": 1}
    assert data["error_count"] == 1
    assert data["client_cpu_ms_per_request"] == pytest.approx(0.5)
    assert data["percentile_method"].startswith("exact")
    assert set(data["ttft_ms"]) == {"count", "mean", "min", "p50", "p90", "p95", "p99", "max"}
    assert data["config"]["mode"] == "rate"


def test_markdown_table_has_one_row_per_run_and_dashes_for_missing_samples() -> None:
    text = sample_result().to_markdown()
    lines = text.splitlines()
    assert lines[0].startswith("| mode | target rps | achieved rps |")
    assert lines[1].startswith("|---|---:|")
    assert lines[2].startswith("| open uniform | 10.0 |")
    assert "Errors by kind: http_429: 1" in text
    assert "> warning:" in text
    plain = sample_result(stream=False)
    row = markdown_table([plain]).splitlines()[2].split(" | ")
    ttft_column = 7
    assert row[ttft_column] == "-"
    assert len(markdown_table([plain, plain]).splitlines()) == 4


def test_progress_off_a_terminal_is_plain_lines_at_most_every_few_seconds() -> None:
    out = io.StringIO()  # not a terminal
    now = [0.0]
    line = ProgressLine(Progress(out=out, every=5.0, clock=lambda: now[0]))
    line.update(Snapshot(elapsed_s=1.0, sent=100, done=90, errors=1, late=0))
    now[0] = 1.0
    line.update(Snapshot(elapsed_s=2.0, sent=300, done=290, errors=2, late=3))  # too soon
    now[0] = 6.0
    line.update(Snapshot(elapsed_s=3.0, sent=400, done=390, errors=2, late=3))
    line.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    assert "\r" not in out.getvalue()
    assert "\x1b" not in out.getvalue()
    assert "rps     100.0" in lines[1]
    assert "errors      2" in lines[1]


def test_quiet_progress_writes_nothing() -> None:
    out = io.StringIO()
    line = ProgressLine(Progress(quiet=True, out=out))
    line.update(Snapshot(elapsed_s=1.0, sent=1, done=1, errors=0, late=0))
    line.close()
    assert out.getvalue() == ""
