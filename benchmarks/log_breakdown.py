"""Where the request log's instructions a record go (issue 23 §1), counted by callgrind part by
part: `benchmarks/instructions.py` counts the whole (the log on against off, 90.7k a record on
`inprocess_cpu.py`'s workload, main dc8b6b2); this splits it.

One process under callgrind (instrumentation off until the parts): `inprocess_cpu.py`'s
workload (the httpx client over `GatewayTransport`, the simulator in the process, the same
request each time) with the log on serves `--warmup` requests, then `--records` more whose
`LogWriter.observe` arguments are kept (the record, the call, what the recorder saw). Each part
then runs on those records, alone, between two callgrind client requests (a tiny C library
compiled here with valgrind's `callgrind.h`: zero the counts, run the part on every record,
dump them under the part's name), so a part's figure is its instructions for all the records
divided by their number (the client requests' own cost, ~100 instructions, spread over them):

- `observe`: `LogWriter.observe` (into the gateway's own writer, its queue emptied after), and
  `row_of` alone (its share);
- the replay features (requestlog/features.py `replay_text`, what `observe` computes from the
  parsed body; until h/loginline `_rows`, from the body's bytes it held), and by part: the
  canonical body bytes (`canonical_body_bytes`: the exact cache computes them only for a request it
  may cache, and this workload's has no temperature), the fingerprint over them (`head_bytes` +
  XXH3-128), the messages serialised and their whole-prompt XXH3, the prefix blocks (none: the
  prompt is under `BLOCK_BYTES`), the features' JSON;
- `_rows`: the batch's rows, as the job builds them (until h/loginline the replay features
  included; since, with no bodies logged, the batch as queued);
- the store's write of those rows (`SqliteLog.write`: the batch is one statement of
  `--records` rows, as a full batch is), into a store already holding the warm-up's rows: its
  Python part (columns, `modes_of`, the statement's values), then the statement within a
  transaction (sqlite3 binding the values and SQLite inserting), then the COMMIT (the WAL
  frames) apart; and again into stores without the `(ts, seq)` index, without the
  `request_id` index and without both, so that each index's share is a difference. Within the
  statement, callgrind's function-level inclusive counts (callgrind_annotate) split sqlite3's
  binding (`pysqlite_statement_bind_parameters`) from SQLite's VDBE (`sqlite3VdbeExec`), and
  of that the b-tree inserts (`sqlite3BtreeInsert`, table and index rows alike) and the
  records' encoding (`OP_MakeRecord` is inline: the rest of the VDBE).

What no part counts is the rest of the whole: the writer's job waking, its thread and the
futures, the event loop's turns, the GIL's hand-overs, garbage collections of the log's
allocations (`benchmarks/instructions.py`'s total minus the parts).

    python benchmarks/log_breakdown.py [--records 500] [--warmup 500] [--keep FOLDER]

Writes benchmarks/results/log_breakdown.{json,md} (`--name`: another name).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import functools
import gc
import json
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
from harness import Output, add_output_options, need_tool, stamp

HERE = Path(__file__).resolve().parent
MARKS_C = """
#include <valgrind/callgrind.h>
void lg_on(void) { CALLGRIND_START_INSTRUMENTATION; }
void lg_zero(void) { CALLGRIND_ZERO_STATS; }
void lg_dump(const char *label) { CALLGRIND_DUMP_STATS_AT(label); }
void lg_toggle(void) { CALLGRIND_TOGGLE_COLLECT; }
"""
# Functions whose inclusive instructions split the store's statement (callgrind_annotate).
STORE_FUNCTIONS = ("_pysqlite_query_execute", "bind_param", "sqlite3_step", "sqlite3VdbeExec",
                   "sqlite3BtreeInsert", "sqlite3BtreeIndexMoveto", "sqlite3WalFrames",
                   "sqlite3PagerCommitPhaseOne")  # fmt: skip


def marks_library(folder: Path) -> Path:
    source = folder / "marks.c"
    source.write_text(MARKS_C)
    lib = folder / "marks.so"
    subprocess.run([need_tool("gcc"), "-O1", "-shared", "-fPIC", "-o", str(lib), str(source)],
                   check=True)  # fmt: skip
    return lib


class Marks:
    def __init__(self, lib: Path) -> None:
        self._lib = ctypes.CDLL(str(lib))
        self._lib.lg_dump.argtypes = [ctypes.c_char_p]

    def on(self) -> None:
        self._lib.lg_on()

    @contextlib.contextmanager
    def part(self, label: str) -> Iterator[None]:
        self._lib.lg_zero()
        yield
        self._lib.lg_dump(label.encode())


def collect_in_observe(lib: Path) -> None:
    """Callgrind collects inside `LogWriter.observe` only (instructions.py `--collect observe`:
    the run starts with collection off): the caches are simulated all along, so its misses are
    those of the request path as it runs, not of a loop over kept records (the parts here)."""
    from levergate.requestlog import writer

    toggle = ctypes.CDLL(str(lib)).lg_toggle
    observe = writer.LogWriter.observe

    def collected(self: Any, record: Any, call: Any, about: Any) -> None:
        toggle()
        try:
            observe(self, record, call, about)
        finally:
            toggle()

    writer.LogWriter.observe = collected  # type: ignore[method-assign]


# ---- the counted process -----------------------------------------------------------------------


def child(args: argparse.Namespace) -> None:
    from instructions import no_log_timers

    no_log_timers()  # as instructions.py: the log writes full batches, rows counted per turn
    asyncio.run(serve_and_count(args))


async def serve_and_count(args: argparse.Namespace) -> None:
    from inprocess_cpu import BODY, served

    from levergate import Settings
    from levergate.requestlog import writer as writer_module

    folder = Path(args.folder)
    seen: list[tuple[Any, ...]] = []
    writers: list[Any] = []
    observe = writer_module.LogWriter.observe

    def keep(self: Any, record: Any, call: Any, about: Any) -> None:
        observe(self, record, call, about)
        if len(seen) < args.records and keeping:
            seen.append((record, call, about))
        if not writers:
            writers.append(self)

    writer_module.LogWriter.observe = keep  # type: ignore[method-assign]
    keeping = False
    values = {"prompt_cache": {"lint": {"enabled": False}},
              "request_log": {"enabled": True, "store": {"sqlite_path": str(folder / "log.db"),
                                                         "timeout_seconds": 600}}}  # fmt: skip
    make = functools.partial(Settings.for_upstream, **values)
    async with served(make, BODY, warmup=args.warmup) as one:
        keeping = True
        for _ in range(args.records):
            await one()
        writer_module.LogWriter.observe = observe  # type: ignore[method-assign]
        await writers[0].flush()
        await count_parts(writers[0], seen, folder, Marks(Path(args.marks)))


async def count_parts(writer: Any, seen: list[tuple[Any, ...]], folder: Path, marks: Marks) -> None:
    from levergate.requestlog.row import row_of

    def queued() -> list[Any]:
        writer.settle()  # the records still held: their rows
        items = list(writer._queue)
        writer._queue.clear()
        writer._hold(items, -1)
        return items

    # Everything each part needs, made before counting: the items `observe` queues (complete
    # rows since h/loginline: no bodies are logged), the replay features' inputs (each call's
    # body, kind and canonical bytes when the exact cache left them), the rows, the stores.
    for record, call, about in seen:
        writer.observe(record, call, about)
    items = queued()
    inputs = []
    for _, call, _ in seen:
        known = call.ctx.trace.canonical
        canonical = known[1] if known is not None and known[0] is call.body else None
        inputs.append((call.body, call.kind, {}, canonical))
    rows = await writer._rows(items)
    stores = _stores(rows, folder)
    gc.collect()
    gc.freeze()
    marks.on()

    def each(label: str, work: Callable[[], Any], *, warm: bool = True) -> None:
        if warm:  # once before: the code's first run (specialising it) is not a record's
            work()
        with marks.part(label):
            work()

    for _ in range(2):  # once before, as `each` does; the queue emptied after each
        with marks.part("observe"):
            for record, call, about in seen:
                writer.observe(record, call, about)
        queued()
    each("row_of", lambda: [row_of(writer._wall(), r) for r, _, _ in seen])
    _count_features(each, inputs)
    with marks.part("_rows"):
        await writer._rows(items)
    writer._hold(items, -1)
    _count_store(each, stores, rows)


def _stores(rows: list[tuple[Any, ...]], folder: Path) -> dict[str, Any]:
    """Copies of the log (the warm-up's rows and the kept ones) with both indexes, one, or
    none, each with the batch's statement compiled (written once and rolled back)."""
    from levergate.requestlog.store import SqliteLog

    stores = {}
    for name, drop in (("both", ()), ("no_ts", ("ts",)), ("no_request", ("request",)),
                       ("none", ("ts", "request"))):  # fmt: skip
        path = folder / f"{name}.db"
        with contextlib.closing(sqlite3.connect(folder / "log.db")) as conn:
            conn.execute(f"VACUUM INTO '{path}'")
        with contextlib.closing(sqlite3.connect(path)) as conn:
            for index in drop:
                conn.execute(f"DROP INDEX lg_requests_{index}")
        store = SqliteLog(str(path), timeout_seconds=600, batch_size=len(rows))
        made = store.schema()
        store.schema = lambda made=made, drop=drop: [  # type: ignore[method-assign]
            s for s in made if not any(f"lg_requests_{i} ON" in s for i in drop)
        ]
        store._with(lambda conn: conn.execute("BEGIN IMMEDIATE"))
        store.write(rows)
        store._conn.execute("ROLLBACK")
        stores[name] = store
    return stores


Each = Callable[..., None]


def _count_features(each: Each, inputs: list[tuple[Any, ...]]) -> None:
    """The replay features' parts, each over every kept record (`inputs`: body, kind,
    controls, canonical bytes)."""
    import xxhash

    from levergate.policies.affinity import block_digests
    from levergate.policies.fingerprint import canonical_body_bytes, head_bytes
    from levergate.requestlog import features

    bodies = [b for b, _, _, _ in inputs]
    canonicals = [canonical_body_bytes(b) for b in bodies]
    found = [features.features_of_body(b, kind=k, model=b["model"]) for b, k, _, _ in inputs]
    each("replay_text", lambda: [
        features.replay_text(b, kind=k, model=b["model"], controls=c, canonical=known)
        for b, k, c, known in inputs
    ])  # fmt: skip
    each("features_of_body", lambda: [
        features.features_of_body(b, kind=k, model=b["model"], canonical=known)
        for b, k, _, known in inputs
    ])  # fmt: skip
    each("canonical_body_bytes", lambda: [canonical_body_bytes(b) for b in bodies])
    each("fingerprint", lambda: [
        xxhash.xxh3_128_hexdigest(head_bytes(k, b["model"], "") + c)
        for (b, k, _, _), c in zip(inputs, canonicals, strict=True)
    ])  # fmt: skip
    each("messages_whole", lambda: [
        xxhash.xxh3_64_intdigest(features._NULL + orjson.dumps(b["messages"])) for b in bodies
    ])  # fmt: skip
    each("blocks", lambda: [
        features.encode_blocks(block_digests(orjson.dumps(b["messages"]),
                                             block_bytes=features.BLOCK_BYTES,
                                             max_blocks=features.MAX_BLOCKS))
        for b in bodies
    ])  # fmt: skip
    each("features_json", lambda: [orjson.dumps(f).decode() for f in found])


def _count_store(each: Each, stores: dict[str, Any], rows: list[tuple[Any, ...]]) -> None:
    """The store's parts: the statement's Python, then each copy's insert and commit."""
    from levergate.requestlog.binds import modes_of

    def python_part(store: Any) -> None:
        columns = list(zip(*rows, strict=True))
        statement = store._statements.choose(modes_of(columns, store._defaults))
        statement.values(columns)

    for name, store in stores.items():
        conn = store._conn
        if name == "both":
            each("store_python", lambda: python_part(store))  # noqa: B023
        conn.execute("BEGIN IMMEDIATE")
        each(f"insert_{name}", lambda: store.write(rows), warm=False)  # noqa: B023
        each(f"commit_{name}", lambda: conn.execute("COMMIT"), warm=False)  # noqa: B023
        store.close()


# ---- the parent ----------------------------------------------------------------------------------


def dumps(prefix: Path) -> dict[str, Path]:
    """Each dump's file by its label."""
    found = {}
    for path in prefix.parent.glob(prefix.name + "*"):
        text = path.read_text(errors="replace")[:4000]
        label = re.search(r"^desc: Trigger: Client Request: (.+)$", text, re.MULTILINE)
        if label:
            found[label.group(1).strip()] = path
    return found


def total(path: Path) -> int:
    found = re.search(r"^(?:summary|totals): (\d+)", path.read_text(), re.MULTILINE)
    if found is None:
        raise RuntimeError(f"{path}: no total")
    return int(found.group(1))


def inclusive(path: Path, names: tuple[str, ...]) -> dict[str, int]:
    """Each function's inclusive instructions in one dump (callgrind_annotate)."""
    done = subprocess.run([need_tool("callgrind_annotate"), "--inclusive=yes", "--threshold=100",
                           str(path)], check=True, capture_output=True, text=True)  # fmt: skip
    found: dict[str, int] = {}
    for line in done.stdout.splitlines():
        match = re.match(r"\s*([\d,]+) \([^)]*\)\s+\S*?:([\w.]+)(?:'\d+)?(?: \[|$)", line)
        if match and match.group(2) in names and match.group(2) not in found:
            found[match.group(2)] = int(match.group(1).replace(",", ""))
    return found


def run(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    lib = marks_library(folder)
    prefix = folder / "breakdown.callgrind"
    argv = [need_tool("valgrind"), "--tool=callgrind", f"--callgrind-out-file={prefix}",
            "--instr-atstart=no", sys.executable, str(Path(__file__).resolve()), "--child",
            "--folder", str(folder), "--marks", str(lib), "--records", str(args.records),
            "--warmup", str(args.warmup)]  # fmt: skip
    subprocess.run(argv, env={**os.environ, "PYTHONHASHSEED": "0"}, check=True)
    files = dumps(prefix)
    per = {label: total(path) / args.records for label, path in files.items()}
    functions = {
        name: {f: v / args.records for f, v in inclusive(files[name], STORE_FUNCTIONS).items()}
        for name in files
        if name.startswith(("insert_", "commit_"))
    }
    return {"parts": per, "functions": functions}


# The longer rows' names (`breakdown`).
_JSON = ("  the features' dict as JSON by orjson (+ decode; since bf671d6 `replay_text` writes the "
         "common record's text itself)")  # fmt: skip
_TEXT_REST = ("  the rest of `replay_text` (the call, the controls; since bf671d6 less than none: "
              "its text and `features_of_body`'s dict against the dict and orjson)")  # fmt: skip
_AROUND = ("around them in `observe` and `_rows` (queueing, the controls; until h/loginline the "
           "`Pending` tuple, the held body parsed again, the row joined, turns)")  # fmt: skip
_BLOCKS = ("(not spent here: the prefix blocks of a prompt of 1 KB or more, `block_digests` + "
           "`encode_blocks`, as counted on this prompt's messages)")  # fmt: skip


def breakdown(found: dict[str, Any]) -> tuple[list[tuple[str, float]], float]:
    """The table's rows (name, instructions a record) of a run, and the parts' sum."""
    p = found["parts"]
    f = found["functions"].get("insert_both", {})
    replay_rest = p["features_of_body"] - sum(
        p[k] for k in ("canonical_body_bytes", "fingerprint", "messages_whole")
    )
    around = p["observe"] + p["_rows"] - p["row_of"] - p["replay_text"]
    insert = p["insert_both"]
    ts_index = p["insert_both"] - p["insert_no_ts"]
    request_index = p["insert_both"] - p["insert_no_request"]
    table = [
        ("on the loop: `observe` (all; since h/loginline the replay features in it)", p["observe"]),
        ("the batch: `_rows` (all; until h/loginline the replay features in it)", p["_rows"]),
        ("`row_of` (the record's values)", p["row_of"]),
        ("replay features: `replay_text` (all)", p["replay_text"]),
        ("  `features_of_body` (all)", p["features_of_body"]),
        ("    canonical body bytes", p["canonical_body_bytes"]),
        ("    fingerprint (head bytes + XXH3-128)", p["fingerprint"]),
        ("    messages serialised + whole-prompt XXH3", p["messages_whole"]),
        ("    the rest (the body's fields read, the dict)", replay_rest),
        (_JSON, p["features_json"]),
        (_TEXT_REST, p["replay_text"] - p["features_of_body"] - p["features_json"]),
        (_AROUND, around),
        ("the store's `write` (all, in a transaction)", insert),
        ("  Python (columns, `modes_of`, the values)", p["store_python"]),
        ("  sqlite3 binding the values (`bind_param`)", f.get("bind_param", 0.0)),
        ("  SQLite's statement (`sqlite3_step`)", f.get("sqlite3_step", 0.0)),
        ("    of it the b-tree inserts (`sqlite3BtreeInsert`)", f.get("sqlite3BtreeInsert", 0.0)),
        ("  index (ts, seq): the write less without it", ts_index),
        ("  index request_id: the write less without it", request_index),
        ("  the write with neither index", p["insert_none"]),
        ("the store: COMMIT (WAL frames)", p["commit_both"]),
    ]
    parts = p["observe"] + p["_rows"] + insert + p["commit_both"]
    table += [
        ("**the parts counted**", parts),
        (_BLOCKS, p["blocks"]),
    ]
    return table, parts


def markdown(data: dict[str, Any]) -> str:
    table, parts = breakdown(data)
    lines = [
        f"# The request log's instructions a record, by part ({data['date']}, {data['machine']})",
        "",
        __doc__.split("    python ")[0].strip(),  # the method
        "",
        (f"{data['records']} records after {data['warmup']} warm-up requests; the store held "
         f"{data['warmup'] + data['records']} rows before the counted insert."
         + (f" Code: {data['code']}." if data.get("code") else "")),
        "",
        "| part | instructions a record |",
        "|---|---:|",
    ]  # fmt: skip
    before = data.get("before")
    old = dict(breakdown(before)[0]) if before else {}
    if before:
        lines[-2] = f"| part | instructions a record | before ({before['name']}) |"
        lines[-1] = "|---|---:|---:|"
    for name, value in table:
        line = f"| {name.replace('  ', '&nbsp;&nbsp;')} | {value:,.0f} |"
        lines.append(line + (f" {old[name]:,.0f} |" if before else ""))
    whole = data["whole_per_record"]
    if whole:
        was = before["whole_per_record"] if before else 0.0
        lines.append(f"| the whole (instructions.py, on - off) | {whole:,.0f} |"
                     + (f" {was:,.0f} |" if before else ""))  # fmt: skip
        lines.append(f"| not in a part (job, thread, loop turns, GIL, GC) | {whole - parts:,.0f} |"
                     + (f" {was - breakdown(before)[1]:,.0f} |" if before else ""))  # fmt: skip
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=500)
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument("--keep", type=Path, help="keep the callgrind files in this folder")
    parser.add_argument(
        "--whole",
        type=float,
        default=0.0,
        help="instructions.py's on - off a request, to show what is left",
    )
    parser.add_argument("--name", default="log_breakdown")
    parser.add_argument("--before", type=Path, help="a run's JSON on the code before: beside")
    parser.add_argument("--before-name", default="before", help="what the code before is")
    parser.add_argument("--render", type=Path,
                        help="a run's JSON: write its markdown again (no run)")  # fmt: skip
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    parser.add_argument("--marks", help=argparse.SUPPRESS)
    add_output_options(parser)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    out = Output.of(args)
    before = None
    if args.before:
        before = {**json.loads(args.before.read_text()), "name": args.before_name}
        before.pop("before", None)
    if args.render:
        data = json.loads(args.render.read_text())
        data["whole_per_record"] = args.whole or data["whole_per_record"]
        data["before"] = before or data.get("before")
        out.write(args.name, data, markdown(data))
        return
    if args.smoke:
        args.records, args.warmup = 20, 20
    with tempfile.TemporaryDirectory(prefix="levergate-breakdown-") as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        found = run(args, folder)
    data = {**stamp(), "records": args.records, "warmup": args.warmup,
            "whole_per_record": args.whole, **found, "before": before}  # fmt: skip
    out.write(args.name, data, markdown(data))


if __name__ == "__main__":
    main()
