"""`levergate log query | tail | export`: the request log from the command line.

    levergate log query --since 1h --outcome error          # newest first, a table
    levergate log query --min-latency-ms 2000 --json        # one JSON document
    levergate log query --summary --since 1d                # totals, savings by lever
    levergate log tail                                      # the last 10, then each new one
    levergate log export --since 7d -o week.parquet         # jsonl | csv | parquet (pyarrow)

The log is read from its store (the configuration's `request_log.store`; `--db FILE` for a
SQLite file) or from a running gateway (`--url`, `GET /admin/log`): cli/log_source.py. Output
follows cli/output.py: the result on stdout (`--json`: one document; `tail --json` and
`export --format jsonl`: one JSON object per line), messages on stderr, exit 2 for bad flags, 3
when the log cannot be read.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import orjson

from levergate.cli.commands import SUMMARY
from levergate.cli.log_source import (
    LogSource,
    SourceError,
    add_filter_flags,
    add_source_flags,
    filter_of,
    newest,
    source_of,
)
from levergate.cli.output import ExitCode, add_json_flag, print_json, warn
from levergate.errors import ConfigError
from levergate.requestlog.query import LogFilter
from levergate.requestlog.row import NAMES

__all__ = ["register"]

EXPORT_PAGE = 1000
# `tail`: how long a missing sequence number is waited for, and how many are (class Follow).
GAP_GRACE_SECONDS = 30.0
MAX_GAPS = 10_000
FORMATS = ("jsonl", "csv", "parquet", "openai-finetune")
# An export's columns: `seq`, the row's (the savings by lever as one `savings` object), `detail`
# and `savings` as JSON text in CSV and Parquet.
EXPORT_COLUMNS = ("seq", *(n for n in NAMES if not n.startswith("saved_") or n == "saved_usd"),
                  "savings")  # fmt: skip


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser("log", help=SUMMARY["log"])
    commands = parser.add_subparsers(dest="log_command", required=True)
    query = commands.add_parser("query", help="records newest first, or --summary")
    query.add_argument("--limit", type=int, default=20, help="records to show (default 20)")
    query.add_argument("--cursor", help="the next page: a previous --json answer's next_cursor")
    query.add_argument("--summary", action="store_true", help="totals instead of records")
    add_json_flag(query)
    query.set_defaults(func=_guarded(run_query))
    tail = commands.add_parser("tail", help="the last records, then each new one as it lands")
    tail.add_argument("-n", "--lines", type=int, default=10, help="records first shown")
    tail.add_argument("--once", action="store_true", help="show the last records and stop")
    tail.add_argument("--interval", type=float, default=1.0, help="seconds between polls")
    tail.add_argument("--json", dest="as_json", action="store_true", help="JSON lines")
    tail.set_defaults(func=_guarded(run_tail))
    export = commands.add_parser("export", help="every matching record to a file")
    export.add_argument("--format", choices=FORMATS, help="default: from -o's suffix, else jsonl")
    export.add_argument("-o", "--output", type=Path, help="the file (default stdout; not parquet)")
    tune = export.add_argument_group("--format openai-finetune (cli/finetune.py): --model STRONG "
                                     "answers as chat fine-tuning JSONL")  # fmt: skip
    tune.add_argument(
        "--shadow-agreed",
        action="store_true",
        help="only strong shadow answers the cheap answer agreed with",
    )
    tune.add_argument("--base-model", help="the model to fine-tune, priced from the catalog "
                      "(default: --model)")  # fmt: skip
    tune.add_argument("--epochs", type=int, default=3, help="training passes (default 3)")
    export.set_defaults(func=_guarded(run_export))
    for command in (query, tail, export):
        add_source_flags(command)
        add_filter_flags(command)


def _guarded(run: Any) -> Any:
    def guarded(args: argparse.Namespace) -> int:
        try:
            source = source_of(args)
        except SourceError as exc:
            warn(str(exc))
            return exc.code
        try:
            return int(run(args, source, filter_of(args)))
        except SourceError as exc:
            warn(str(exc))
            return exc.code
        finally:
            source.close()

    return guarded


# ---- query ----------------------------------------------------------------------------------


def run_query(args: argparse.Namespace, source: LogSource, where: LogFilter) -> int:
    if not 1 <= args.limit <= 10_000:
        raise ConfigError("--limit must be 1 to 10000")
    if args.summary:
        summary = source.summary(where)
        print_json(summary) if args.as_json else print(render_summary(summary))
        return ExitCode.OK
    page = source.page(where, cursor=args.cursor, limit=args.limit)
    if args.as_json:
        print_json({"object": "list", "data": page.records, "next_cursor": page.next_cursor})
        return ExitCode.OK
    if not page.records:
        warn(f"no records in the request log at {source.where}{_matching(where)}")
        return ExitCode.OK
    print(table(page.records))
    if page.next_cursor:
        warn(f"more: --cursor {page.next_cursor}")
    return ExitCode.OK


def _matching(where: LogFilter) -> str:
    given = where.describe()
    return " matching " + ", ".join(f"{k}={v}" for k, v in given.items()) if given else ""


HEAD = ("time (UTC)", "request", "model", "answered", "outcome", "total ms", "ttft ms",
        "in", "out", "cost $", "saved $")  # fmt: skip


def _cells(r: dict[str, Any]) -> list[str]:
    # The id's last 12 characters: levergate's ids begin with their batch's time (core/ids.py),
    # which 256 requests in a row share; a client's own id is shown from its end too.
    when = datetime.fromtimestamp(r["ts"], UTC).strftime("%Y-%m-%d %H:%M:%S")
    ttft = "-" if r.get("ttft_ms") is None else f"{r['ttft_ms']:.1f}"
    prompt = r["input_tokens"] + r["cached_tokens"] + r["cache_write_tokens"]
    return [when, r["request_id"][-12:], r["model"], r["alias"] or (r["cache"] or "-"),
            r["outcome"], f"{r['total_ms']:.1f}", ttft, str(prompt), str(r["output_tokens"]),
            f"{r['cost_usd']:.6f}", f"{r['saved_usd']:.6f}"]  # fmt: skip


def table(records: list[dict[str, Any]]) -> str:
    rows = [list(HEAD), *(_cells(r) for r in records)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEAD))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
                     for row in rows)  # fmt: skip


def render_summary(s: dict[str, Any]) -> str:
    if not s["requests"]:
        return "no records"
    span = f"{_time(s['first_ts'])} .. {_time(s['last_ts'])}"
    lines = [f"requests  {s['requests']:,} ({s['errors']:,} errors), {span}",
             (f"tokens    input {s['input_tokens']:,} (cached {s['cached_tokens']:,}, cache "
             f"writes {s['cache_write_tokens']:,}), output {s['output_tokens']:,}"),
             f"spend     ${s['cost_usd']:.6f}", f"saved     ${s['saved_usd']:.6f} net"]  # fmt: skip
    lines += [f"  {lever:<13} ${usd:.6f}" for lever, usd in s["savings"].items() if usd]
    return "\n".join(lines)


def _time(ts: float | None) -> str:
    return "-" if ts is None else datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S")


# ---- tail -----------------------------------------------------------------------------------


class Follow:
    """Which records `tail` has shown. Sequence numbers can commit out of order: PostgreSQL
    hands one out at INSERT, and replicas commit their batches when each finishes, so a record
    may land below one already shown. A gap below the newest shown record is watched for
    `grace` seconds (at most `max_gaps` of them), then given up: a rolled-back insert leaves a
    number that never commits."""

    def __init__(
        self, seq: int, *, grace: float = GAP_GRACE_SECONDS, max_gaps: int = MAX_GAPS
    ) -> None:
        self.floor = seq  # every number at or below it is shown or given up
        self._grace, self._max_gaps = grace, max_gaps
        self._shown: set[int] = set()  # above the floor
        self._gaps: dict[int, float] = {}  # a missing number -> when it was first missed

    def fresh(self, records: list[dict[str, Any]], now: float) -> list[dict[str, Any]]:
        """The records not shown yet, in sequence order; it remembers them as shown."""
        new = sorted((r for r in records if self._new(int(r["seq"]))), key=lambda r: r["seq"])
        for record in new:
            self._shown.add(int(record["seq"]))
            self._gaps.pop(int(record["seq"]), None)
        top = max(self._shown, default=self.floor)
        for seq in range(max(self.floor + 1, top - self._max_gaps), top):
            if seq not in self._shown:
                self._gaps.setdefault(seq, now)
        self._advance(now, top)
        return new

    def _new(self, seq: int) -> bool:
        return seq > self.floor and seq not in self._shown

    def _advance(self, now: float, top: int) -> None:
        expired = [seq for seq, since in self._gaps.items() if now - since >= self._grace]
        for seq in expired:
            del self._gaps[seq]
        self.floor = max(self.floor, min(self._gaps, default=top + 1) - 1)
        self._shown = {seq for seq in self._shown if seq > self.floor}
        self._gaps = {seq: since for seq, since in self._gaps.items() if seq > self.floor}


def run_tail(args: argparse.Namespace, source: LogSource, where: LogFilter) -> int:
    if not 0 <= args.lines <= 10_000 or not 0.05 <= args.interval <= 3600:
        raise ConfigError("--lines must be 0 to 10000 and --interval 0.05 to 3600 seconds")
    last = list(newest(source, where, page=args.lines, most=args.lines))[::-1]
    follow = Follow(max((int(r["seq"]) for r in last), default=source.last_seq()))
    _show(last, as_json=args.as_json, head=True)
    if args.once:
        return ExitCode.OK
    while True:
        time.sleep(args.interval)
        newer = follow.fresh(_after(source, where, follow.floor), time.monotonic())
        if newer:
            _show(newer, as_json=args.as_json, head=False)


def _after(source: LogSource, where: LogFilter, seq: int) -> list[dict[str, Any]]:
    """Every record above `seq`, a page at a time (those shown already come back too while a
    gap below them is waited for)."""
    found: list[dict[str, Any]] = []
    while len(page := source.after(seq, where, limit=EXPORT_PAGE)) == EXPORT_PAGE:
        found += page
        seq = int(page[-1]["seq"])
    return found + page


def _show(records: list[dict[str, Any]], *, as_json: bool, head: bool) -> None:
    if as_json:
        for record in records:
            sys.stdout.write(orjson.dumps(record).decode() + "\n")
    elif records:
        text = table(records)
        sys.stdout.write((text if head else text.split("\n", 1)[1]) + "\n")
    sys.stdout.flush()


# ---- export ---------------------------------------------------------------------------------


def run_export(args: argparse.Namespace, source: LogSource, where: LogFilter) -> int:
    form = args.format or _format_of(args.output)
    if form == "openai-finetune":
        from levergate.cli import finetune

        return finetune.run(args, source, where)
    if form == "parquet" and args.output is None:
        raise ConfigError("--format parquet needs -o FILE")
    records = newest(source, where, page=EXPORT_PAGE)
    if form == "parquet":
        count = write_parquet(records, args.output)
    elif args.output is None:
        count = _write_text(records, form, sys.stdout)
    else:
        with args.output.open("w", encoding="utf-8", newline="") as out:
            count = _write_text(records, form, out)
    warn(f"exported {count:,} records" + (f" to {args.output}" if args.output else ""))
    return ExitCode.OK


def _format_of(path: Path | None) -> str:
    suffix = path.suffix.lstrip(".").lower() if path is not None else ""
    return suffix if suffix in FORMATS else "jsonl"


def _write_text(records: Iterator[dict[str, Any]], form: str, out: TextIO) -> int:
    count = 0
    writer = csv.writer(out) if form == "csv" else None
    if writer is not None:
        writer.writerow(EXPORT_COLUMNS)
    for record in records:
        if writer is None:
            out.write(orjson.dumps(record).decode() + "\n")
        else:
            writer.writerow([_flat(record.get(c)) for c in EXPORT_COLUMNS])
        count += 1
    return count


def _flat(value: Any) -> Any:
    return orjson.dumps(value).decode() if isinstance(value, dict | list) else value


def write_parquet(records: Iterator[dict[str, Any]], path: Path) -> int:
    """The records as one Parquet file (`pyarrow`, the `parquet` extra)."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ConfigError("Parquet needs pyarrow: pip install 'levergate[parquet]'") from None
    rows = [[_flat(r.get(c)) for c in EXPORT_COLUMNS] for r in records]
    columns = {c: [row[i] for row in rows] for i, c in enumerate(EXPORT_COLUMNS)}
    pq.write_table(pa.table(columns), path)
    return len(rows)
