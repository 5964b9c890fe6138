"""`levergate labels export`: the shadow comparisons logged from live traffic, as router labels.

    levergate labels export --route auto -o auto.csv [--config gateway.yaml | --db log.sqlite3 |
                                                      --url http://gw:8080 --admin-token T]
    levergate router train auto.csv --cheap-model small --strong-model large -o router.json

Each shadow sample a route or cascade took (routing.shadow, cascade.shadow) is a row of the
request log's labels table (requestlog/labels.py); `export` writes one route's as the CSV or
JSONL `levergate router train` reads (`prompt`, `CHEAP_correct`, `STRONG_correct`, with `ts`,
`route` and `request_id` beside them; requestlog/router_labels.py says what a label means) and
prints the counts per route and per day of every route in the window. A route with fewer labels
than `--min-rows` is refused, naming the minimum: a router learned from a handful of rows would
promise a quality nobody measured.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from levergate.cli.commands import SUMMARY
from levergate.cli.output import emit_report, warn
from levergate.config.routing import LEARN_MIN_LABELS
from levergate.errors import BadRequest, ConfigError

__all__ = ["register"]


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser("labels", help=SUMMARY["labels"])
    commands = parser.add_subparsers(dest="labels_command", required=True)
    export = commands.add_parser("export", help="one route's logged labels, as router train reads")
    add = export.add_argument
    add("--route", required=True, help="the route (or cascade) whose labels to write")
    add("-o", "--output", type=Path, required=True, help="the file: .csv or .jsonl")
    add("--cheap-model", help="only labels of this cheap alias (default: the one with most)")
    add("--min-rows", type=int, default=LEARN_MIN_LABELS,
        help="refuse fewer labels than this (default %(default)s)")  # fmt: skip
    add_log_flags(export)
    add("--json", dest="as_json", action="store_true", help="the counts as one JSON document")
    add("--json-out", metavar="FILE", help="also write the counts as JSON to FILE")
    export.set_defaults(func=run_export)


def add_log_flags(parser: argparse.ArgumentParser) -> None:
    """Where the labels are (the store `--config` names, `--db FILE`, or a running gateway's
    `--url`) and which time window."""
    from levergate.cli.log_source import add_label_source_flags

    add_label_source_flags(parser)


def window(args: argparse.Namespace) -> tuple[float | None, float | None]:
    from levergate.requestlog.query import parse_time

    now = time.time()
    try:
        return tuple(  # type: ignore[return-value]
            None if v is None else parse_time(v, param=name, now=now)
            for name, v in (("since", args.since), ("until", args.until))
        )
    except BadRequest as exc:
        raise ConfigError(f"{exc.message} (--{exc.param})") from None


def run_export(args: argparse.Namespace) -> int:
    from levergate.cli.log_source import SourceError, labels_of
    from levergate.requestlog.labels import Labelled
    from levergate.requestlog.router_labels import read_log_labels, write_labels

    if args.min_rows < 1:
        raise ConfigError("--min-rows must be at least 1")
    if args.output.suffix.lower() not in {".csv", ".jsonl", ".ndjson"}:
        raise ConfigError(f"--output {args.output}: write .csv or .jsonl")
    since, until = window(args)
    source = labels_of(args)
    where = source.where
    try:
        counts = source.label_counts(Labelled(since=since, until=until))
        found = read_log_labels(source, route=args.route, since=since, until=until,
                                cheap=args.cheap_model, min_rows=args.min_rows)  # fmt: skip
    except SourceError as exc:
        warn(f"the request log at {where} cannot be read: {exc}")
        return exc.code
    finally:
        source.close()
    write_labels(found, args.output)
    report = {"log": where, "route": args.route, "cheap": found.cheap, "strong": found.strong,
              "rows": len(found), "agree": int(found.labels.cheap.sum()),
              "output": str(args.output), "counts": counts}  # fmt: skip
    emit_report(report, args, render)
    return 0


def render(r: dict[str, Any]) -> str:
    lines = [(f"{r['rows']} labels of route {r['route']} ({r['cheap']} against {r['strong']}, "
             f"{r['agree']} agreeing) -> {r['output']}"), "",
             ("day          layer    route/cascade      cheap -> strong        labels  agree  "
             "with prompt")]  # fmt: skip
    for c in r["counts"]:
        day = time.strftime("%Y-%m-%d", time.gmtime(c["day"]))
        pair = f"{c['cheap']} -> {c['strong']}"
        lines.append(f"{day}   {c['layer']:<8} {c['name']:<18} {pair:<22} {c['labels']:>6} "
                     f"{c['agree']:>6} {c['with_prompt']:>12}")  # fmt: skip
    return "\n".join(lines)
