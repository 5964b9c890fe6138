"""`levergate analyze`: what each lever would save on your own traffic, before you turn it on.

    levergate analyze --config candidate.yaml --since 7d          # the gateway's request log
    levergate analyze --config candidate.yaml --records week.jsonl --json   # a log export
    levergate analyze --config candidate.yaml --requests batch_input.jsonl  # OpenAI requests
    levergate analyze --config candidate.yaml --trace mooncake --trace-model gpt-4o-mini
    levergate analyze --config candidate.yaml --baseline current.yaml --html analysis.html
    levergate analyze --config keyed.yaml --provider-machines 64   # OpenAI's cache routing

The requests are replayed in arrival order, in virtual time, under the baseline settings
(`--baseline`, default the running configuration: the environment and the defaults) and under
the candidate (`--config`), and each lever the candidate changes is replayed alone on the
baseline (analyze/replay.py; the latency model fitted to the logged timings: analyze/fit.py).
The log is read where `levergate log` reads it (`--db`, `--url`, or the store the baseline's
settings name). A candidate that does not validate is a configuration error naming its field,
before anything is read; a malformed input line is reported by its number and skipped; an input
with nothing to replay is a clear message and exit code 1.

stdout: a table (`--json`: the analysis as one JSON document); `--html FILE` writes the page.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from levergate.cli.commands import SUMMARY
from levergate.cli.log_source import (
    SourceError,
    add_filter_flags,
    filter_of,
    newest,
    source_of,
)
from levergate.cli.output import ExitCode, Progress, add_json_flag, print_json, warn
from levergate.config import Settings
from levergate.errors import ConfigError

__all__ = ["register"]

PAGE = 1000
MAX_REQUESTS = 10_000_000
MAX_MACHINES = 4096


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser("analyze", help=SUMMARY["analyze"])
    parser.add_argument("--config", required=True, type=Path,
                        help="the candidate settings (YAML) to evaluate")  # fmt: skip
    parser.add_argument("--baseline", type=Path,
                        help="the settings to compare with (default: the running "
                        "configuration, the environment and the defaults)")  # fmt: skip
    given = parser.add_argument_group("input (default: the request log)")
    one = given.add_mutually_exclusive_group()
    one.add_argument("--records", type=Path, help="a `levergate log export` JSONL file")
    one.add_argument("--requests", type=Path,
                     help="OpenAI requests, JSONL: Batch input lines or chat bodies")  # fmt: skip
    one.add_argument("--trace", help="a bench trace: azure, mooncake, ... or a file")
    one.add_argument("--db", type=Path, help="a request log SQLite file")
    one.add_argument("--url", help="a running gateway's base URL: read GET /admin/log")
    given.add_argument("--admin-token", help="with --url (default: LEVERGATE_ADMIN__TOKEN)")
    given.add_argument("--interval", type=float, default=1.0,
                       help="--requests: seconds between lines without a timestamp")  # fmt: skip
    given.add_argument("--trace-model", default="gpt-4o-mini",
                       help="--trace: the alias its requests ask for")  # fmt: skip
    given.add_argument("--limit", type=int, default=MAX_REQUESTS,
                       help="read at most this many requests")  # fmt: skip
    parser.add_argument("--provider-machines", type=int, default=1, metavar="N",
                        help="the OpenAI-style provider's prompt-cache machines, routed by "
                        "prefix and prompt_cache_key (default 1: one cache per key and "
                        "model, where prompt_cache_key changes nothing)")  # fmt: skip
    parser.add_argument("--html", type=Path, help="also write the analysis as an HTML page")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    add_json_flag(parser, "the analysis")
    add_filter_flags(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from levergate.analyze.analysis import analyse
    from levergate.analyze.plan import plan_of
    from levergate.analyze.render import table
    from levergate.report.analysis import html
    from levergate.simulator.settings import PromptCacheSettings

    if not 1 <= args.limit <= MAX_REQUESTS or not 0 < args.interval <= 86400:
        raise ConfigError(f"--limit must be 1 to {MAX_REQUESTS} and --interval 0 to 86400")
    if not 1 <= args.provider_machines <= MAX_MACHINES:
        raise ConfigError(f"--provider-machines must be 1 to {MAX_MACHINES}")
    candidate = Settings.load(args.config)  # a bad field: ConfigError, before any reading
    baseline = Settings.load(args.baseline) if args.baseline else Settings.load()
    progress = Progress(quiet=args.quiet or args.as_json)
    given = _read(args)
    if given is None:
        return ExitCode.UNREACHABLE
    for line in given.skipped.lines:
        warn(line)
    if given.skipped.malformed > len(given.skipped.lines):
        warn(f"{given.skipped.malformed - len(given.skipped.lines):,} more lines skipped")
    if not given.requests:
        warn(f"nothing to analyse: no successful requests in {given.source}{_range(args)}")
        return ExitCode.FAILED
    # The CLI is single-threaded here (the log's store is closed): the replays may fork.
    result = analyse(given, baseline=plan_of(baseline), candidate=plan_of(candidate),
                     progress=progress.update, fork=True,
                     provider=PromptCacheSettings(machines=args.provider_machines))  # fmt: skip
    progress.close()
    if args.html is not None:
        args.html.write_text(html(result), encoding="utf-8")
        warn(f"wrote {args.html}")
    print_json(result) if args.as_json else print(table(result))
    return ExitCode.OK


def _range(args: argparse.Namespace) -> str:
    given = filter_of(args).describe()
    return " matching " + ", ".join(f"{k}={v}" for k, v in given.items()) if given else ""


def _read(args: argparse.Namespace) -> Any:
    from levergate.analyze.inputs import Skipped, from_bodies, from_records, read_lines

    skipped = Skipped()
    if args.requests is not None:
        _readable(args.requests)
        return from_bodies(args.requests, interval=args.interval, skipped=skipped)
    if args.trace is not None:
        return _trace(args)
    if args.records is not None:
        _readable(args.records)
        lines = ((f"{args.records}:{n}", v) for n, v in read_lines(args.records, skipped))
        return from_records(_first(lines, args.limit), skipped=skipped,
                            source=f"records from {args.records.name}")  # fmt: skip
    where = filter_of(args)
    try:
        source = source_of(argparse.Namespace(
            url=args.url, admin_token=args.admin_token, db=args.db,
            config=str(args.baseline) if args.baseline else None,
        ))  # fmt: skip
    except SourceError as exc:
        warn(str(exc))
        return None
    try:
        given = from_records(_first(_pages(source, where), args.limit), skipped=skipped,
                             source=f"the request log at {source.where}")  # fmt: skip
        given.labels = _labels(source, where)
    except SourceError as exc:
        warn(str(exc))
        return None
    finally:
        source.close()
    return given


def _labels(source: Any, where: Any) -> list[dict[str, Any]]:
    """The routes' live quality where the source has it: the store's shadow labels over the
    analysed time range, or a running gateway's `levergate_route_quality_retention` gauge."""
    from levergate.requestlog.labels import Labelled

    if hasattr(source, "label_counts"):
        found: list[dict[str, Any]] = source.label_counts(
            Labelled(since=where.since, until=where.until))  # fmt: skip
        return found
    if hasattr(source, "gauge"):
        values = source.gauge("levergate_route_quality_retention", "route")
        return [{"layer": "route", "name": k, "gauge": v} for k, v in values.items()]
    return []


def _readable(path: Path) -> None:
    if not path.is_file():
        raise ConfigError(f"no such file: {path}")


def _first(items: Iterator[Any], most: int) -> Iterator[Any]:
    for n, item in enumerate(items):
        if n >= most:
            warn(f"read the first {most:,} requests only (--limit)")
            return
        yield item


def _pages(source: Any, where: Any) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for record in newest(source, where, page=PAGE):
        yield f"record {record.get('seq')}", record


def _trace(args: argparse.Namespace) -> Any:
    from levergate.analyze.inputs import from_trace
    from levergate.bench.traces import load_trace, read_trace, resolve_trace

    path = resolve_trace(args.trace)
    records = load_trace(_first(read_trace(path), args.limit))
    return from_trace(records, model=args.trace_model, source=f"the trace {path.name}")
