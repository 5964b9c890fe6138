"""Where the request log's CPU goes on the wall clock: its parts taken away one at a time.

Callgrind counts the log's instructions (`instructions.py`, `log_breakdown.py`), but an
instruction of the log's costs more than one of the request path's on average (2026-12-05, an
AMD EPYC: ~61k instructions a record, ~1.04x of off counted, ~1.06x of off in CPU time). This
measures the parts' CPU time instead: `inprocess_cpu.py`'s workload (httpx, gateway and
simulator in one process), each side in its own process, sides alternating round by round,
medians. Each side takes one more part away than the one before it:

    off          the log off
    on           the log on (SQLite in a temporary folder)
    no-store     on, but SQLite's inserts skipped (`SqliteLog.writing` yields, no SQL)
    no-features  and the replay features one constant text (`replay_text`)
    no-row       and the row one constant tuple (`row_of`): what is left is `observe`'s own
                 work, the queue, the job's turns
    no-observe   on, `observe` doing nothing: the extension's presence (its job, its store)

so that the differences between neighbours are the parts' costs. Not a measurement on a loaded
host: run it on a quiet one.

    python benchmarks/log_split.py [--rounds 5] [--requests 4000]

Writes benchmarks/results/log_split.{json,md}.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from harness import Output, add_output_options, stamp, turned

SIDES = ("off", "on", "no-store", "no-features", "no-row", "no-observe")
KINDS = ("whole", "stream")


def _take_away(side: str) -> None:
    """Take the parts `side` names away (in the child, before the gateway is built)."""
    from levergate.requestlog import store, writer

    if side == "no-observe":

        def observe(*_: Any) -> None:
            return None

        writer.LogWriter.observe = observe  # type: ignore[method-assign]
        return
    if side in {"no-store", "no-features", "no-row"}:

        def writing(self: Any, rows: Any, *, at_once: int) -> Any:
            if self._conn is None:
                raise store.LogStoreBusy("not connected yet")
            for _ in range(0, len(rows), at_once):
                yield

        store.SqliteLog.writing = writing  # type: ignore[method-assign]
    if side in {"no-features", "no-row"}:
        # The real one's signature: `**kwargs` here built a dict a record (~0.5k instructions,
        # callgrind; results/logrest.md) that "the rest" was charged with.
        def replay_text(_: Any, *, kind: Any, model: Any, controls: Any,  # noqa: ARG001
                        canonical: Any = None) -> str:  # noqa: ARG001  # fmt: skip
            return '{"v":2}'

        writer.replay_text = replay_text  # type: ignore[assignment]
    if side == "no-row":
        real, kept = writer.row_of, []

        def row_of(at: float, record: Any, bodies: Any = (None, None), replay: Any = None) -> Any:
            if not kept:
                kept.append(real(at, record, bodies, replay))
            return kept[0]

        writer.row_of = row_of  # type: ignore[assignment]


def child(side: str, requests: int, folder: str) -> None:
    import inprocess_cpu  # beside this file

    _take_away(side)
    log = None if side == "off" else str(Path(folder) / f"{side}-{os.getpid()}.sqlite3")
    found = []
    for kind in KINDS:
        run = functools.partial(inprocess_cpu.cpu_per_request, requests, request_log=log)
        found.append(asyncio.run(run(stream=kind == "stream")))
    print(*found)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--child", choices=SIDES, help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    add_output_options(parser)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.requests, args.folder)
        return
    out = Output.of(args)
    if args.smoke:
        args.rounds, args.requests = 1, 30
    runs: dict[str, dict[str, list[float]]] = {s: {k: [] for k in KINDS} for s in SIDES}
    with tempfile.TemporaryDirectory(prefix="levergate-log-split-") as folder:
        for n in range(args.rounds):
            order = turned(SIDES, n)
            for side in order if n % 2 == 0 else order[::-1]:
                argv = [sys.executable, __file__, "--child", side,
                        "--requests", str(args.requests), "--folder", folder]  # fmt: skip
                done = subprocess.run(argv, check=True, capture_output=True, text=True)
                for kind, value in zip(KINDS, done.stdout.split(), strict=True):
                    runs[side][kind].append(float(value))
    medians = {s: {k: statistics.median(v) for k, v in by.items()} for s, by in runs.items()}
    data = {**stamp(), "rounds": args.rounds, "requests": args.requests, "runs": runs,
            "medians": medians}  # fmt: skip
    out.write("log_split", data, render(data))


def render(data: dict[str, Any]) -> str:
    m = data["medians"]
    lines = [
        f"# The request log's CPU, part by part ({data['date']}, {data['machine']})",
        "",
        (
            f"`benchmarks/log_split.py --rounds {data['rounds']} --requests {data['requests']}`: "
            "CPU microseconds a request in-process (client, gateway, simulator), medians of "
            "alternating rounds; each side takes one more part of the log away (the module's "
            "docstring). A part's cost is the difference from the side before it. Rounds of one "
            "side move by several microseconds: the parts are indicative, not exact."
        ),
        "",
        "| side | whole us/req | / off | part (whole) | stream us/req | / off | part (stream) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    parts = {"on": "", "no-store": "SQLite: on - no-store",
             "no-features": "features: no-store - no-features",
             "no-row": "row: no-features - no-row", "no-observe": "", "off": ""}  # fmt: skip
    before = {"no-store": "on", "no-features": "no-store", "no-row": "no-features"}
    for side in SIDES:
        cells = []
        for kind in KINDS:
            value, off = m[side][kind], m["off"][kind]
            part = f"{m[before[side]][kind] - value:+.1f}" if side in before else ""
            cells += [f"{value:.1f}", f"{value / off:.3f}x", part]
        lines.append(f"| {side} | " + " | ".join(cells) + " |")
    rest = {k: m["no-row"][k] - m["off"][k] for k in KINDS}
    lines += [
        "",
        "Parts: " + "; ".join(p for p in parts.values() if p) + f"; the rest (no-row - off) "
        f"{rest['whole']:+.1f} us whole, {rest['stream']:+.1f} us stream.",
        "",
        "Every round, us a request (whole / stream):",
        "",
        *(f"- {side}: {[round(v) for v in runs['whole']]} / {[round(v) for v in runs['stream']]}"
          for side, runs in data["runs"].items()),
    ]  # fmt: skip
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
