"""What does the request log cost? Two A/Bs in one run, each in alternating rounds so off and on
see the same machine at the same moments.

1. In-process (`inprocess_cpu.py`: httpx client, gateway and simulator in one process, each
   round a child process): CPU microseconds per request with `request_log` off and on (SQLite in
   a temporary folder), steady state (inprocess_cpu.py's window: after a warm-up of two of the
   log's batches, written; every request's record written in the window). "On" counts
   everything the log does per record — the hold on the request path, the rows and features
   built 32 at a time, SQLite inserting and indexing them, the checkpoints in their thread.
   Goal (issue 23): at most 5% more.
2. Through the proxy: four `levergate serve` processes in front of one `levergate sim` (0 ms),
   the log off, off again (`off2`: the A/A, how far two identical gateways differ in the same
   run, what "no measurable change" is judged against), on, and on with tracing exported to a
   receiver in another process (issue 22 §3: log + OTel at most 1.1x of off), loaded in turn
   by the same closed-loop client (concurrency 1 and 16, whole answers): p50 latency and the
   gateway process's CPU per request (from /proc). Goal (issue 23): no measurable change.

    python benchmarks/log_ab.py [--rounds 6] [--requests 3000] [--seconds 3]
    python benchmarks/log_ab.py --smoke

Writes benchmarks/results/log_ab.{json,md}.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import trees_ab
from harness import Output, add_output_options, paired, stamp
from otel_ab import receiving
from trees_ab import Side

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
PROXY_SIDES = (Side("off", SRC, "off"), Side("off2", SRC, "off"), Side("on", SRC, "log"),
               Side("on+otel", SRC, "log+otel"))  # fmt: skip


def inprocess_round(requests: int, log: str | None) -> dict[str, float]:
    argv = [
        sys.executable,
        str(HERE / "inprocess_cpu.py"),
        "--requests",
        str(requests),
        "--rounds",
        "1",
    ]
    if log is not None:
        argv += ["--request-log", log]
    out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    words = out.split()  # "stream 1234.5 us/request, whole 987.6 us/request"
    return {"stream": float(words[1]), "whole": float(words[4])}


def inprocess(rounds: int, requests: int, folder: Path) -> dict[str, list[dict[str, float]]]:
    runs: dict[str, list[dict[str, float]]] = {"off": [], "on": []}
    for n in range(rounds):
        order = ("off", "on") if n % 2 == 0 else ("on", "off")
        for side in order:
            log = str(folder / f"inprocess-{n}.sqlite3") if side == "on" else None
            runs[side].append(inprocess_round(requests, log))
    return runs


def proxy(rounds: int, seconds: float, folder: Path, concurrency: tuple[int, ...]) -> list[Any]:
    """`trees_ab.py --proxy`'s rounds with this tree's four sides (`PROXY_SIDES`)."""
    with receiving() as endpoint:
        return trees_ab.proxy(PROXY_SIDES, rounds=rounds, seconds=seconds,
                              concurrency=concurrency, endpoint=endpoint,
                              folder=folder)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--only", choices=("inprocess", "proxy"), help="one of the two A/Bs")
    add_output_options(parser)
    args = parser.parse_args()
    out = Output.of(args)
    concurrency = (1, 16)
    if args.smoke:
        args.rounds, args.requests, args.seconds, concurrency = 1, 30, 0.3, (1,)
    with tempfile.TemporaryDirectory(prefix="levergate-log-ab-") as tmp:
        folder = Path(tmp)
        runs = {} if args.only == "proxy" else inprocess(args.rounds, args.requests, folder)
        rows = [] if args.only == "inprocess" else proxy(args.rounds, args.seconds, folder,
                                                             concurrency)  # fmt: skip
    data = {
        **stamp(),
        "rounds": args.rounds,
        "requests": args.requests,
        "seconds": args.seconds,
        "inprocess": runs,
        "proxy": rows,
    }
    out.write("log_ab", data, markdown(data, concurrency))


def markdown(data: dict[str, Any], concurrency: tuple[int, ...]) -> str:
    head = [f"# Request log A/B ({data['date']}, {data['machine']})", "",
            (f"`benchmarks/log_ab.py --rounds {data['rounds']} --requests {data['requests']} "
            f"--seconds {data['seconds']}`: off and on in alternating rounds (medians; every "
            "round in the last column; paired: the median of each round's own ratio, its two "
            "sides run back to back). The host is shared with other sessions' tests, so single "
            "rounds vary widely.")]  # fmt: skip
    parts = [*head]
    if data["inprocess"]:
        parts += _inprocess(data["inprocess"])
    if data["proxy"]:
        parts += _proxy(data["proxy"], concurrency)
    return "\n".join(parts) + "\n"


def _inprocess(runs: dict[str, list[dict[str, float]]]) -> list[str]:
    lines = ["", ("In-process: CPU microseconds per request of client, gateway and simulator in "
             "one process, steady state: the log's writer thread and the writes of every "
             "request's record included, what a process pays once (the store's connection, its "
             "statements compiled, its close) not (inprocess_cpu.py)."), "",
             ("| path | off us/req | on us/req | on / off | paired on / off (quartiles) "
              "| rounds off / on |"),
             "|---|---|---|---|---|---|"]  # fmt: skip
    for what in ("whole", "stream"):
        off, on = (statistics.median(r[what] for r in runs[s]) for s in ("off", "on"))
        ratio, low, high = paired(*([r[what] for r in runs[s]] for s in ("on", "off")))
        spread = " / ".join(", ".join(f"{r[what]:.0f}" for r in runs[s]) for s in ("off", "on"))
        lines.append(f"| {what} | {off:.1f} | {on:.1f} | {on / off:.3f} "
                     f"| {ratio:.3f} ({low:.3f}-{high:.3f}) | {spread} |")  # fmt: skip
    return lines


def _proxy(rows: list[dict[str, Any]], concurrency: tuple[int, ...]) -> list[str]:
    return ["", ("Through the proxy: `levergate serve` with the log off, off again (off2: the "
            "A/A, what no change looks like in this run), on, and on with tracing "
            "(every request's spans exported to a receiver in another process that drops them), "
            "side by side in front of one `levergate sim` (0 ms), closed loop, whole answers; the "
            "gateway process's CPU per request from /proc (paired: the median of each round's "
            "own ratio to off); p99 shows the loop's pauses for the log (a batch's turns, a "
            "checkpoint)."), "",
            *trees_ab.proxy_table(rows, [s.name for s in PROXY_SIDES], concurrency)]  # fmt: skip


if __name__ == "__main__":
    main()
