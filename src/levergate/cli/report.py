"""`levergate report`: one self-contained HTML report (charts inline, opens offline) and a
markdown summary, from the request log or a `levergate bench` result.

    levergate report --since 1d -o day.html                  # the log (as `levergate log`)
    levergate report --url http://127.0.0.1:8080 --since 2h  # a gateway's log, and its gauges
    levergate report --records week.jsonl -o week.html       # a `levergate log export` file
    levergate report --bench result.json -o bench.html       # `levergate bench --json-out`

stdout gets the markdown summary (`--json`: the report's data as one JSON document); the HTML
goes to `-o` (default `levergate-report.html`), `--markdown FILE` writes the summary too. Lines
of a JSONL file that are not records are reported with their line numbers and skipped; a log
with no records in the range is a clear message and exit code 1.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import httpx
import orjson
from prometheus_client.parser import text_string_to_metric_families

from levergate.cli.commands import SUMMARY
from levergate.cli.log_source import (
    LogSource,
    SourceError,
    add_filter_flags,
    add_source_flags,
    filter_of,
    source_of,
)
from levergate.cli.output import ExitCode, add_json_flag, print_json, warn
from levergate.config import Settings
from levergate.core.json_bound import parse_json
from levergate.errors import ConfigError
from levergate.report.data import from_bench, from_records
from levergate.report.page import html, markdown
from levergate.requestlog.query import LogFilter

__all__ = ["register"]

PAGE = 1000
REQUIRED = ("ts", "outcome", "total_ms", "cost_usd", "saved_usd", "input_tokens",
            "cached_tokens", "cache_write_tokens", "output_tokens", "model", "alias")  # fmt: skip
GAUGES = ("levergate_route_quality_retention", "levergate_cascade_quality_retention",
          "levergate_router_quality_retention")  # fmt: skip
MAX_REPORTED_LINES = 20
# A record's numbers the report adds up, null where the log keeps none: text in one of them
# (a spreadsheet's round trip) stopped the whole report with a traceback.
NUMBERS = ("total_ms", "cost_usd", "saved_usd", "input_tokens", "cached_tokens",
           "cache_write_tokens", "output_tokens", "ttft_ms", "queued_ms")  # fmt: skip
# The largest number a report takes (epoch seconds, milliseconds, dollars, tokens): a date is
# printed for any time below it (requestlog/query.py's bound on one), and a chart's scale holds
# it; 1e308 overflowed both.
MOST = 1e11


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser("report", help=SUMMARY["report"])
    given = parser.add_argument_group("input (default: the request log)")
    given.add_argument("--records", type=Path, help="a `levergate log export` JSONL file")
    given.add_argument("--bench", type=Path, help="a `levergate bench --json-out` result")
    parser.add_argument("-o", "--output", type=Path, default=Path("levergate-report.html"))
    parser.add_argument("--markdown", type=Path, help="also write the summary here")
    parser.add_argument("--title", default="levergate report")
    parser.add_argument("--source", help="how the page names its input (default: where it is)")
    parser.add_argument("--max-records", type=int, default=1_000_000,
                        help="read at most this many of the newest records")  # fmt: skip
    add_json_flag(parser, "the report's data")
    add_source_flags(parser)
    parser.add_argument("--metrics-token", help="with --url and auth on: the gateway's "
                        "metrics.token, for its quality gauges (default: "
                        "LEVERGATE_METRICS__TOKEN)")  # fmt: skip
    add_filter_flags(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.records is not None and args.bench is not None:
        raise ConfigError("--records and --bench exclude each other")
    if args.bench is not None:
        source = args.source or f"levergate bench result {args.bench.name}"
        report = from_bench(_json_file(args.bench), title=args.title, source=source)  # fmt: skip
    else:
        found = _records(args)
        if found is None:
            return ExitCode.UNREACHABLE
        records, source, quality = found
        if not records:
            warn(f"no records in {source}{_range(filter_of(args))}: nothing to report")
            return ExitCode.FAILED
        report = from_records(records, title=args.title, source=args.source or source,
                              quality=quality)  # fmt: skip
    args.output.write_text(html(report), encoding="utf-8")
    summary = markdown(report)
    if args.markdown is not None:
        args.markdown.write_text(summary, encoding="utf-8")
    print_json(report) if args.as_json else print(summary, end="")
    warn(f"wrote {args.output}")
    return ExitCode.OK


def _range(where: LogFilter) -> str:
    given = where.describe()
    return " matching " + ", ".join(f"{k}={v}" for k, v in given.items()) if given else ""


def _records(args: argparse.Namespace) -> tuple[list[dict[str, Any]], str, dict[str, float]] | None:
    if args.records is not None:
        return read_jsonl(args.records), f"records from {args.records.name}", {}
    where = filter_of(args)
    try:
        source = source_of(args)
    except SourceError as exc:
        warn(str(exc))
        return None
    try:
        records = _all(source, where, most=args.max_records)
    except SourceError as exc:
        warn(str(exc))
        return None
    finally:
        source.close()
    quality = _gauges(args.url, _metrics_token(args)) if args.url else {}
    return records, f"the request log at {source.where}", quality


def _all(source: LogSource, where: LogFilter, *, most: int) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    cursor = None
    while len(found) < most:
        page = source.page(where, cursor=cursor, limit=min(PAGE, most - len(found)))
        found += page.records
        if page.next_cursor is None:
            return found
        cursor = page.next_cursor
    warn(f"read the newest {most:,} records only (--max-records)")
    return found


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The records of a JSONL file; a line that is not one is reported (line number, why) and
    skipped."""
    records: list[dict[str, Any]] = []
    bad = 0
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    with handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            problem = _problem(line)
            if isinstance(problem, dict):
                records.append(problem)
                continue
            bad += 1
            if bad <= MAX_REPORTED_LINES:
                warn(f"{path}:{number}: skipped: {problem}")
    if bad > MAX_REPORTED_LINES:
        warn(f"{path}: {bad - MAX_REPORTED_LINES} more lines skipped")
    return records


def _problem(line: bytes) -> dict[str, Any] | str:
    """The record on `line`, or why it is not one."""
    try:
        value = parse_json(line)
    except (orjson.JSONDecodeError, ValueError) as exc:
        return f"not JSON ({str(exc).splitlines()[0][:80]})"
    if not isinstance(value, dict):
        return "not a JSON object"
    missing = [k for k in REQUIRED if k not in value]
    if missing:
        return f"not a request record (no {', '.join(missing[:3])})"
    if not _number(value["ts"]) or not 0 <= value["ts"] < MOST or value["total_ms"] is None:
        return "not a request record (ts must be epoch seconds, total_ms a number)"
    wrong = [k for k in NUMBERS if value.get(k) is not None and not _number(value[k])]
    if wrong:
        return f"not a request record ({', '.join(wrong[:3])} must be numbers)"
    if not isinstance(value["outcome"], str) or not isinstance(value.get("cache") or "", str):
        return "not a request record (outcome and cache must be text)"
    if not _numbers(value.get("savings") or {}):
        return "not a request record (savings must name levers and amounts)"
    return value


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and abs(value) < MOST


def _numbers(value: object) -> bool:
    """A JSON object of numbers."""
    return isinstance(value, dict) and all(map(_number, value.values()))


def _bench_problem(value: dict[str, Any]) -> str | None:
    """Why a bench result cannot be drawn (report/data.py's `from_bench`), or None."""
    samples = value.get("samples") or {}
    if not isinstance(samples, dict):
        return "samples must be an object"
    for name in ("total_ms", "ttft_ms"):
        summary, every = value.get(name) or {}, samples.get(name) or []
        if not _numbers(summary) or not isinstance(every, list) or not all(map(_number, every)):
            return f"{name} must be milliseconds"
        if any(v < 0 for v in (*summary.values(), *every)):
            return f"{name} must be milliseconds >= 0"
    if not all(isinstance(value.get(k), int) for k in ("ok", "sent")):
        return "ok and sent must be counts"
    if not isinstance(value.get("config") or {}, dict):
        return "config must be an object"
    if not isinstance(value.get("warnings") or [], list):
        return "warnings must be a list"
    rps = value.get("achieved_rps")
    return None if rps is None or _number(rps) else "achieved_rps must be a number"


def _json_file(path: Path) -> dict[str, Any]:
    try:
        value = parse_json(path.read_bytes())
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    except (orjson.JSONDecodeError, ValueError) as exc:
        raise ConfigError(f"{path} is not JSON: {str(exc).splitlines()[0]}") from None
    if not isinstance(value, dict) or "total_ms" not in value:
        raise ConfigError(f"{path} is not a `levergate bench` result (no total_ms)")
    if (problem := _bench_problem(value)) is not None:
        raise ConfigError(f"{path} is not a `levergate bench` result ({problem})")
    return value


def _metrics_token(args: argparse.Namespace) -> str | None:
    if args.metrics_token:
        return str(args.metrics_token)
    token = Settings.load().metrics.token
    return None if token is None else token.get_secret_value()


def _gauges(url: str, token: str | None) -> dict[str, float]:
    """The quality gauges of a gateway's /metrics; none, with a warning, when it refuses."""
    headers = {} if token is None else {"authorization": f"Bearer {token}"}
    metrics = url.rstrip("/").removesuffix("/v1") + "/metrics"
    try:
        response = httpx.get(metrics, headers=headers, timeout=10)
        if response.status_code != 200:
            hint = " (--metrics-token)" if response.status_code in (401, 403) else ""
            warn(f"{metrics} answered {response.status_code}{hint}: no quality gauges")
            return {}
        families = list(text_string_to_metric_families(response.text))
    except (httpx.HTTPError, ValueError) as exc:
        warn(f"{metrics} could not be read ({type(exc).__name__}): no quality gauges")
        return {}
    found = {}
    for family in families:
        for s in family.samples:
            if s.name in GAUGES:
                labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
                found[f"{s.name}{{{labels}}}"] = s.value
    return found
