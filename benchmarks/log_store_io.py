"""What the SQLite request log's writes cost the kernel a record, on a log that has grown
(issue 23 §1): bytes written (WAL frames and the checkpoints' copies into the database file),
write and read system calls, system and user CPU, with request ids drawn at random against ids
that grow with time (core/ids.py), and SQLite settings.

Why apart from `otel_where.py` and `log_breakdown.py`: those write a few thousand records into
a new log, whose `request_id` index is a few dozen pages that stay in SQLite's cache whatever
the ids; the gateway's log holds up to `request_log.max_bytes` (1 GiB by default, millions of
records). A random id lands on a random leaf of that index, so a batch of 500 records dirties
~500 index pages (each one WAL frame of a page, then copied back at the checkpoint), and reads
the ones out of SQLite's cache from the kernel's; ids whose first bytes are the time append.

Each variant runs in a process of its own: a new log filled with `--fill` records (rows of the
request log's tests, `tests/unit/requestlog/records.py`, a replay text of the usual size, ids
of the variant, one request every `--gap-ms` of a virtual clock), through `SqliteLog.write` in
full batches, a checkpoint every `CHECKPOINT_ROWS` rows as the writer runs them (SQLite's own
off, as `writing` turns them off), then `--batches` more batches measured: the process's
`/proc/self/io` (wchar: bytes passed to write calls; syscw, syscr) and `getrusage` (system,
user CPU) before and after, per record. The store runs in the main thread (the gateway's runs
in its writer's thread and on its event loop; the counts are the same calls).

    python benchmarks/log_store_io.py [--fill 200000] [--batches 100] [--variants ...]

Writes benchmarks/results/log_store_io.{json,md} (`--name`: another name).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from harness import ROOT, Output, add_output_options, stamp

BATCH = 500
# A replay text of the usual size (requestlog/features.py's JSON for a one-message chat).
REPLAY = json.dumps({"v": 4, "fp": "f" * 32, "model": "fast", "msgs": 1, "prompt_bytes": 812,
                     "whole": "a" * 32, "blocks": [], "tools": 0, "max_tokens": 256})  # fmt: skip
# name -> (ids, PRAGMAs run after the store connects, the new file's page size: 0 the store's
# `PAGE_SIZE`)
VARIANTS: dict[str, tuple[str, tuple[str, ...], int]] = {
    "random ids (24 hex, before)": ("random", (), 0),
    "random ids (32 hex)": ("random32", (), 0),
    "time-ordered ids": ("ordered", (), 0),
    "random ids (24 hex), cache 16 MiB": ("random", ("cache_size = -16384",), 0),
    "time-ordered ids, cache 16 MiB": ("ordered", ("cache_size = -16384",), 0),
    "time-ordered ids, checkpoint 4000 pages": ("ordered", ("wal_autocheckpoint = 4000",), 0),
    "time-ordered ids, 4 KiB pages": ("ordered", (), 4096),
    "time-ordered ids, 8 KiB pages": ("ordered", (), 8192),
    "time-ordered ids, 16 KiB pages": ("ordered", (), 16384),
}


class Ids:
    """Request ids as the gateway draws them, 256 at a time: `ordered`, each batch's first
    6 bytes the virtual time in ms (core/ids.py), then 10 random; `random`, 12 random bytes
    (levergate's before 2026-12); `random32`, 16 (as long as the ordered)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._left: list[str] = []

    def next(self, ms: int) -> str:
        if not self._left:
            if self.kind == "ordered":
                head = ms.to_bytes(6, "big").hex()
                self._left = [head + os.urandom(10).hex() for _ in range(256)]
            else:
                size = 16 if self.kind == "random32" else 12
                self._left = [os.urandom(size).hex() for _ in range(256)]
            self._left.reverse()
        return self._left.pop()


def counters() -> dict[str, float]:
    found: dict[str, float] = {}
    for line in Path("/proc/self/io").read_text().splitlines():
        key, _, value = line.partition(":")
        found[key] = float(value)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    found["stime_us"] = usage.ru_stime * 1e6
    found["utime_us"] = usage.ru_utime * 1e6
    return found


def run_variant(args: argparse.Namespace) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT / "tests" / "unit" / "requestlog"))
    from records import record  # the request log's tests' records

    from levergate.requestlog import store as store_module
    from levergate.requestlog.row import row_of
    from levergate.requestlog.store import SqliteLog
    from levergate.requestlog.writer import CHECKPOINT_ROWS

    ids_kind, pragmas, page_size = VARIANTS[args.variant]
    if page_size:
        store_module.PAGE_SIZE = page_size  # this process's stores: the variant's only
    ids = Ids(ids_kind)
    templates = [row_of(0.0, record(n)) for n in range(50)]
    folder = Path(tempfile.mkdtemp(prefix="lg-store-io-"))
    store = SqliteLog(str(folder / "log.db"), timeout_seconds=5.0, batch_size=BATCH)
    store.last_seq()  # connects
    for pragma in pragmas:
        store._conn.execute(f"PRAGMA {pragma}")
    ms = 1_796_000_000_000
    n = 0

    def batch() -> list[tuple[Any, ...]]:
        nonlocal ms, n
        rows = []
        for _ in range(BATCH):
            ms += args.gap_ms
            head = templates[n % len(templates)]
            rows.append((ms / 1000, ids.next(ms), *head[2:-1], REPLAY))
            n += 1
        return rows

    store._conn.execute("PRAGMA wal_autocheckpoint = 0")  # the writer's own, as `write`:
    unchecked = 0

    def write(rows: list[tuple[Any, ...]]) -> None:
        nonlocal unchecked
        store.write(rows)
        unchecked += len(rows)
        if unchecked >= CHECKPOINT_ROWS:
            unchecked = 0
            store.checkpoint()

    for _ in range(args.fill // BATCH):
        write(batch())
    ready = [batch() for _ in range(args.batches)]
    before = counters()
    for rows in ready:
        write(rows)
    after = counters()
    size = store._used_bytes(0)  # the pages in use, the WAL's not yet copied back included
    store.close()
    records = args.batches * BATCH
    per = {k: (after[k] - before[k]) / records for k in after}
    return {"variant": args.variant, "records_before": args.fill, "records": records,
            "db_bytes": size, "per_record": per}  # fmt: skip


def markdown(results: list[dict[str, Any]], args: argparse.Namespace, when: dict[str, str]) -> str:
    from levergate.requestlog.writer import CHECKPOINT_ROWS

    head = (f"# The SQLite request log's I/O a record on a grown log ({when['date']}, "
            f"{when['machine']})")  # fmt: skip
    method = (
        f"`benchmarks/log_store_io.py --fill {args.fill} --batches {args.batches} "
        f"--gap-ms {args.gap_ms}`: a log filled with {args.fill:,} records, then "
        f"{args.batches * BATCH:,} more written in batches of {BATCH} (`SqliteLog.write`, a "
        f"checkpoint every {CHECKPOINT_ROWS:,} rows as the writer's), "
        "counted per record. wchar/rchar: bytes passed to write/read calls (the WAL frames, "
        "the checkpoints' copies); syscw/syscr: those calls; log MB: its pages in use at the "
        "end. Counts; the CPU times are indicative (a shared host)."
    )
    columns = ("| variant | wchar bytes | syscw | rchar bytes | syscr | system CPU us "
               "| user CPU us | log MB |")  # fmt: skip
    lines = [head, "", method, "", columns, "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        p = r["per_record"]
        lines.append(
            f"| {r['variant']} | {p['wchar']:,.0f} | {p['syscw']:.2f} | {p['rchar']:,.0f} | "
            f"{p['syscr']:.2f} | {p['stime_us']:.1f} | {p['utime_us']:.1f} | "
            f"{r['db_bytes'] / 1e6:.0f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_output_options(parser)
    parser.add_argument("--fill", type=int, default=200_000)
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--gap-ms", type=int, default=10, help="virtual ms between requests")
    parser.add_argument("--variants", nargs="*", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--variant", help=argparse.SUPPRESS)
    parser.add_argument("--name", default="log_store_io")
    args = parser.parse_args()
    if args.variant:
        print(json.dumps(run_variant(args)))
        return
    if args.smoke:
        args.fill, args.batches = 1000, 2
    results = []
    for variant in args.variants:
        done = subprocess.run(
            [sys.executable, __file__, "--variant", variant, "--fill", str(args.fill),
             "--batches", str(args.batches), "--gap-ms", str(args.gap_ms)],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
        results.append(json.loads(done.stdout.splitlines()[-1]))
    when = stamp()
    Output.of(args).write(args.name, {**when, "results": results}, markdown(results, args, when))


if __name__ == "__main__":
    main()
