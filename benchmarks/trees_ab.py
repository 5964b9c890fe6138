"""Source trees side by side on the wall clock: CPU per request of the in-process path (httpx
client, gateway and simulator in one process: `otel_ab.py`'s child) for sides that each name a
tree's `src/` and what is on in it, in alternating rounds (each side a child process, the order
turning every round), so that a change and the code before it are timed in the same minutes.
`log_ab.py` and `otel_ab.py` compare settings of one tree; this compares trees (a worktree, a
copy with one lever changed), the wall clock's counterpart of `instructions.py --log-tree`.

    off        the request log off, no tracing
    log        the request log on (SQLite in a temporary folder)
    otel       every request traced, exported to a receiver in another process (200, dropped)
    log+otel   both

A side is NAME=SRC:MODE; the first side is the baseline of the ratios (medians of the rounds,
and paired: the median of each round's own ratio to the baseline's, with its quartiles).

    python benchmarks/trees_ab.py --side off=src:off --side log=src:log \\
        --side new=../wt/x/src:log [--rounds 12] [--requests 3000] [--name trees_ab]
    python benchmarks/trees_ab.py --smoke

Writes benchmarks/results/<name>.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, NamedTuple

from harness import Output, add_output_options, free_port, paired, stamp, stop, turned, wait_port

HERE = Path(__file__).resolve().parent
MODES = ("off", "log", "otel", "log+otel")
KINDS = ("whole", "stream")


class Side(NamedTuple):
    name: str
    src: Path
    mode: str


def side(text: str) -> Side:
    name, _, rest = text.partition("=")
    src, _, mode = rest.rpartition(":")
    if not name or not src or mode not in MODES:
        raise argparse.ArgumentTypeError(f"NAME=SRC:MODE with MODE one of {', '.join(MODES)}")
    if not (Path(src) / "levergate").is_dir():
        raise argparse.ArgumentTypeError(f"{src}: no levergate package there")
    return Side(name, Path(src).resolve(), mode)


def run(one: Side, requests: int, endpoint: str, log: str) -> dict[str, float]:
    argv = [sys.executable, str(HERE / "otel_ab.py"), "--child", "--requests", str(requests)]
    if "otel" in one.mode:
        argv += ["--endpoint", endpoint]
    if "log" in one.mode:
        argv += ["--log", log]
    done = subprocess.run(argv, check=True, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(one.src)})  # fmt: skip
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--side", type=side, action="append", default=[], dest="sides")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--name", default="trees_ab")
    add_output_options(parser)
    args = parser.parse_args()
    out = Output.of(args)
    if args.smoke:
        src = HERE.parent / "src"
        args.sides = [Side("off", src, "off"), Side("log+otel", src, "log+otel")]
        args.rounds, args.requests = 1, 50
    if len(args.sides) < 2 or len({s.name for s in args.sides}) != len(args.sides):
        parser.error("two --side at least, each named differently")
    port = free_port()
    receiver = subprocess.Popen([sys.executable, str(HERE / "otel_ab.py"), "--receiver",
                                 str(port)])  # fmt: skip
    runs: dict[str, dict[str, list[float]]] = {s.name: {k: [] for k in KINDS} for s in args.sides}
    try:
        wait_port(port)
        with tempfile.TemporaryDirectory(prefix="levergate-trees-ab-") as folder:
            for n in range(args.rounds):
                for one in turned(tuple(args.sides), n):
                    found = run(one, args.requests, f"http://127.0.0.1:{port}",
                                f"{folder}/{one.name}-{n}")  # fmt: skip
                    for kind in KINDS:
                        runs[one.name][kind].append(found[kind])
    finally:
        stop(receiver)
    data: dict[str, Any] = {**stamp(), "rounds": args.rounds, "requests": args.requests,
                            "sides": [[s.name, str(s.src), s.mode] for s in args.sides],
                            "runs": runs}  # fmt: skip
    out.write(args.name, data, render(data))


def render(data: dict[str, Any]) -> str:
    sides = [name for name, _, _ in data["sides"]]
    base = sides[0]
    lines = [
        f"# Source trees side by side ({data['date']}, {data['machine']})",
        "",
        (f"`benchmarks/trees_ab.py --rounds {data['rounds']} --requests {data['requests']}`: "
         "CPU microseconds per request of the in-process path (client, gateway and simulator in "
         "one process), medians of alternating rounds; ratios to the first side, and paired "
         "(the median of each round's own ratio, with its quartiles)."),
        "",
        "| side | tree | mode | " + " | ".join(
            f"{k} us/req | {k} / {base} | {k} paired" for k in KINDS) + " |",
        "|---|---|---|" + "---:|---:|---:|" * len(KINDS),
    ]  # fmt: skip
    for name, src, mode in data["sides"]:
        cells = []
        for kind in KINDS:
            mine, theirs = data["runs"][name][kind], data["runs"][base][kind]
            ratio, low, high = paired(mine, theirs)
            cells += [f"{statistics.median(mine):.1f}",
                      f"{statistics.median(mine) / statistics.median(theirs):.3f}",
                      f"{ratio:.3f} ({low:.3f}-{high:.3f})"]  # fmt: skip
        lines.append(f"| {name} | {src} | {mode} | " + " | ".join(cells) + " |")
    lines += ["", "Every round, us a request (whole / stream):", ""]
    for name in sides:
        by = data["runs"][name]
        lines.append(f"- {name}: " + " / ".join(
            "[" + ", ".join(f"{v:.0f}" for v in by[k]) + "]" for k in KINDS))  # fmt: skip
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
