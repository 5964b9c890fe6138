"""`levergate report`'s inputs (cli/report.py): a line of a JSONL file that is not a record it
can add up is reported with its number and skipped; a bench result it cannot draw is exit 2."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from levergate.cli.report import _json_file, read_jsonl
from levergate.errors import ConfigError
from levergate.report.data import from_bench, from_records
from levergate.report.page import html, markdown
from levergate.requestlog.row import as_dict, row_of
from tests.unit.requestlog.records import record

GOOD = {"seq": 1, **as_dict(row_of(1_000_000.0, record(1)))}


@pytest.mark.parametrize(
    "change",
    [
        {"cost_usd": "0.1"},  # a spreadsheet's round trip: a number as text
        {"input_tokens": "5"},
        {"ttft_ms": "5"},
        {"queued_ms": [1]},
        {"savings": [1]},
        {"savings": {"exact": "0.1"}},
        {"cost_usd": -1e308},  # a chart of no scale
        {"ts": 1e308},  # no date to print
        {"ts": -1e308},
        {"outcome": 5},
    ],
)
def test_a_line_whose_fields_are_not_a_records_is_skipped_by_number(
    change: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "records.jsonl"
    path.write_text(json.dumps(GOOD) + "\n" + json.dumps(GOOD | change) + "\n")
    found = read_jsonl(path)
    assert found == [GOOD]
    assert f"{path}:2: skipped: not a request record" in capsys.readouterr().err
    report = from_records(found, title="t", source="s")
    assert html(report)
    assert markdown(report)


def test_a_record_with_nulls_where_the_log_keeps_them_is_read(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    nulls = GOOD | {"ttft_ms": None, "savings": None, "cost_usd": None, "alias": None}
    path.write_text(json.dumps(nulls) + "\n")
    assert read_jsonl(path) == [nulls]


@pytest.mark.parametrize(
    "result",
    [
        {"total_ms": 5},
        {"total_ms": {"p50": "a"}},
        {"total_ms": {}, "ok": None, "sent": 1},
        {"total_ms": {}, "ok": 1, "sent": 1, "samples": {"total_ms": ["x"]}},
        {"total_ms": {}, "ok": 1, "sent": 1, "warnings": 5},
        {"total_ms": {}, "ok": 1, "sent": 1, "config": [1]},
        {"total_ms": {"p50": 1e308, "max": -1e308}, "ok": 1, "sent": 1},
    ],
)
def test_a_bench_result_it_cannot_draw_is_a_usage_error(
    result: dict[str, Any], tmp_path: Path
) -> None:
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(result))
    with pytest.raises(ConfigError, match="not a `levergate bench` result"):
        _json_file(path)


def test_a_bench_result_as_bench_writes_it_is_drawn(tmp_path: Path) -> None:
    path = tmp_path / "bench.json"
    result = {"total_ms": {"p50": 10.0, "p99": 20.0, "max": 30.0}, "ttft_ms": None, "ok": 3,
              "sent": 3, "errors": 0, "achieved_rps": None, "samples": {"total_ms": [1, 2.5]},
              "config": {"url": "u"}, "warnings": ["w"]}  # fmt: skip
    path.write_text(json.dumps(result))
    report = from_bench(_json_file(path), title="t", source="s")
    assert html(report)
    assert markdown(report)
