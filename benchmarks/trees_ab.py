"""Source trees side by side on the wall clock, for sides that each name a tree's `src/` and what
is on in it, in alternating rounds (the order turning every round), so that a change and the code
before it are timed in the same minutes. `log_ab.py` and `otel_ab.py` compare settings of one
tree; this compares trees (a worktree, a copy with one lever changed), the wall clock's
counterpart of `instructions.py --log-tree`.

- In-process (the default): CPU per request of the in-process path (httpx client, gateway and
  simulator in one process: `otel_ab.py`'s child), each side a child process.
- `--proxy`: each round, one `levergate serve` a side (its tree on PYTHONPATH) in front of one
  `levergate sim` (0 ms), loaded in turn by the same closed-loop client (`--concurrency`, whole
  answers): the gateway process's CPU per request (from /proc) and its p50 and p99
  (`log_ab.py`'s proxy A/B runs this with four sides of one tree).

    off        the request log off, no tracing
    log        the request log on (SQLite in a temporary folder)
    otel       every request traced, exported to a receiver in another process (200, dropped)
    log+otel   both

A side is NAME=SRC:MODE; the first side is the baseline of the ratios (medians of the rounds,
and paired: the median of each round's own ratio to the baseline's, with its quartiles).

    python benchmarks/trees_ab.py --side off=src:off --side log=src:log \\
        --side new=../wt/x/src:log [--rounds 12] [--requests 3000] [--name trees_ab]
    python benchmarks/trees_ab.py --proxy --side off=src:off --side log=src:log \\
        --side new=../wt/x/src:log [--concurrency 1 --concurrency 16] [--seconds 3]
    python benchmarks/trees_ab.py --smoke

Writes benchmarks/results/<name>.{json,md}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from subprocess import Popen
from typing import Any, NamedTuple

from harness import (
    Output,
    add_output_options,
    cpu_seconds,
    free_port,
    paired,
    stamp,
    stop,
    turned,
    wait_port,
)
from otel_ab import receiving
from overhead import load

HERE = Path(__file__).resolve().parent
MODES = ("off", "log", "otel", "log+otel")
LEVERGATE = [sys.executable, "-m", "levergate.cli.main"]
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


def inprocess(sides: Sequence[Side], *, rounds: int, requests: int, endpoint: str,
              folder: str) -> dict[str, dict[str, list[float]]]:  # fmt: skip
    runs: dict[str, dict[str, list[float]]] = {s.name: {k: [] for k in KINDS} for s in sides}
    for n in range(rounds):
        for one in turned(tuple(sides), n):
            found = run(one, requests, endpoint, f"{folder}/{one.name}-{n}")
            for kind in KINDS:
                runs[one.name][kind].append(found[kind])
    return runs


def serve(one: Side, *, upstream: str, port: int, endpoint: str, log: Path) -> Popen[bytes]:
    """`levergate serve` from `one`'s tree, with what its mode turns on."""
    env = {**os.environ, "PYTHONPATH": str(one.src)}
    if "log" in one.mode:
        env |= {"LEVERGATE_REQUEST_LOG__ENABLED": "true",
                "LEVERGATE_REQUEST_LOG__STORE__SQLITE_PATH": str(log)}  # fmt: skip
    if "otel" in one.mode:
        env["LEVERGATE_OTEL__ENDPOINT"] = endpoint
    argv = [*LEVERGATE, "serve", "--upstream", upstream, "--port", str(port)]
    return subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def proxy(sides: Sequence[Side], *, rounds: int, seconds: float, concurrency: Sequence[int],
          endpoint: str, folder: Path) -> list[dict[str, Any]]:  # fmt: skip
    """Every side's gateway loaded in turn, at each concurrency, round after round: a row per
    side, round and concurrency. Each round starts its own gateways: one process's own costs
    stay with it (the same gateway off, kept for 12 rounds at c=1, used 1.09x the CPU of another
    off, 2026-12-05; Python's method cache is keyed by addresses, so each process's heap layout
    moves its count), so they are drawn anew each round and pairing spans them."""
    sim_port = free_port()
    sim = subprocess.Popen([*LEVERGATE, "sim", "--port", str(sim_port)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    upstream = f"http://127.0.0.1:{sim_port}/v1"
    rows: list[dict[str, Any]] = []
    gateways: dict[str, Popen[bytes]] = {}
    try:
        wait_port(sim_port, proc=sim)
        for n in range(rounds):
            ports = {one.name: free_port() for one in sides}
            gateways = {one.name: serve(one, upstream=upstream, port=ports[one.name],
                                        endpoint=endpoint, log=folder / f"{one.name}-{n}.sqlite3")
                        for one in sides}  # fmt: skip
            for name, port in ports.items():
                wait_port(port, proc=gateways[name])
            order = [one.name for one in turned(tuple(sides), n)]
            for c in concurrency:
                rows.extend(
                    {"round": n, "side": name, "concurrency": c,
                     **_loaded(ports[name], gateways[name].pid, c, seconds)}
                    for name in (order if n % 2 == 0 else order[::-1])
                )  # fmt: skip
            for proc in gateways.values():
                stop(proc)
    finally:
        for proc in (*gateways.values(), sim):
            if proc.poll() is None:
                stop(proc)
    return rows


def _loaded(port: int, pid: int, concurrency: int, seconds: float) -> dict[str, float]:
    url = f"http://127.0.0.1:{port}/v1"
    asyncio.run(load(url, concurrency=concurrency, stream=False, seconds=min(0.5, seconds)))
    before = cpu_seconds(pid)
    result = asyncio.run(load(url, concurrency=concurrency, stream=False, seconds=seconds))
    used = cpu_seconds(pid) - before
    return {
        "p50_ms": result["total_ms"].get("p50", float("nan")),
        "p99_ms": result["total_ms"].get("p99", float("nan")),
        "rps": result["throughput_rps"] or 0.0,
        "cpu_us_per_request": 1e6 * used / max(1, result["completed"]),
    }


def proxy_table(rows: list[dict[str, Any]], sides: Sequence[str],
                concurrency: Sequence[int]) -> list[str]:  # fmt: skip
    """The proxy rows as a table: medians, ratios to the first side, paired CPU."""
    base = sides[0]
    lines = [(f"| concurrency | side | p50 ms | / {base} | p99 ms | / {base} | CPU us/req "
              f"| / {base} | paired CPU / {base} (quartiles) |"),
             "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    keys, digits = ("p50_ms", "p99_ms", "cpu_us_per_request"), (3, 3, 1)
    for c in concurrency:
        runs = {s: [r for r in rows if r["side"] == s and r["concurrency"] == c] for s in sides}
        med = {s: {k: statistics.median(r[k] for r in runs[s]) for k in keys} for s in sides}
        for side in sides:
            cells = [f"{med[side][k]:.{n}f} | {med[side][k] / med[base][k]:.3f}"
                     for k, n in zip(keys, digits, strict=True)]  # fmt: skip
            cpu = [[r["cpu_us_per_request"] for r in runs[s]] for s in (side, base)]
            ratio, low, high = paired(*cpu)
            lines.append(f"| {c} | {side} | " + " | ".join(cells)
                         + f" | {ratio:.3f} ({low:.3f}-{high:.3f}) |")  # fmt: skip
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--side", type=side, action="append", default=[], dest="sides")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--requests", type=int, default=3000, help="in-process: a round's")
    parser.add_argument("--proxy", action="store_true", help="through `levergate serve`")
    parser.add_argument("--concurrency", type=int, action="append", default=[],
                        help="--proxy: the client's (repeatable; default 16)")  # fmt: skip
    parser.add_argument("--seconds", type=float, default=3.0, help="--proxy: a side's load")
    parser.add_argument("--name", default="trees_ab")
    add_output_options(parser)
    args = parser.parse_args()
    out = Output.of(args)
    concurrency = args.concurrency or [16]
    if args.smoke:  # both paths, tiny
        src = HERE.parent / "src"
        args.sides = [Side("off", src, "off"), Side("log+otel", src, "log+otel")]
        args.rounds, args.requests, args.seconds, concurrency = 1, 50, 0.3, [1]
    if len(args.sides) < 2 or len({s.name for s in args.sides}) != len(args.sides):
        parser.error("two --side at least, each named differently")
    if min(concurrency) < 1:
        parser.error("--concurrency: 1 or more")
    runs: dict[str, dict[str, list[float]]] = {}
    rows: list[dict[str, Any]] = []
    with receiving() as endpoint, tempfile.TemporaryDirectory(prefix="levergate-trees-ab-") as tmp:
        if args.smoke or not args.proxy:
            runs = inprocess(args.sides, rounds=args.rounds, requests=args.requests,
                             endpoint=endpoint, folder=tmp)  # fmt: skip
        if args.smoke or args.proxy:
            rows = proxy(args.sides, rounds=args.rounds, seconds=args.seconds,
                         concurrency=concurrency, endpoint=endpoint, folder=Path(tmp))  # fmt: skip
    data: dict[str, Any] = {**stamp(), "rounds": args.rounds, "requests": args.requests,
                            "seconds": args.seconds, "concurrency": concurrency,
                            "sides": [[s.name, str(s.src), s.mode] for s in args.sides],
                            "runs": runs, "proxy": rows}  # fmt: skip
    out.write(args.name, data, render(data))


def render(data: dict[str, Any]) -> str:
    sides = [name for name, _, _ in data["sides"]]
    lines = [f"# Source trees side by side ({data['date']}, {data['machine']})", "", "Sides:", "",
             *(f"- {name}: `{src}`, {mode}" for name, src, mode in data["sides"])]  # fmt: skip
    if data["runs"]:
        lines += _inprocess(data, sides)
    if data["proxy"]:
        lines += ["", (f"`benchmarks/trees_ab.py --proxy --rounds {data['rounds']} --seconds "
                       f"{data['seconds']}`: through `levergate serve` in front of `levergate "
                       "sim` (0 ms), closed loop, whole answers; medians of alternating rounds "
                       "(each round's gateways started anew); the gateway process's CPU per "
                       "request from /proc, paired: the median of each round's own ratio to "
                       "the first side's, with its quartiles."), "",
                  *proxy_table(data["proxy"], sides, data["concurrency"])]  # fmt: skip
    return "\n".join(lines) + "\n"


def _inprocess(data: dict[str, Any], sides: list[str]) -> list[str]:
    base = sides[0]
    lines = [
        "",
        (f"`benchmarks/trees_ab.py --rounds {data['rounds']} --requests {data['requests']}`: "
         "CPU microseconds per request of the in-process path (client, gateway and simulator in "
         "one process), medians of alternating rounds; ratios to the first side, and paired "
         "(the median of each round's own ratio, with its quartiles)."),
        "",
        "| side | " + " | ".join(
            f"{k} us/req | {k} / {base} | {k} paired" for k in KINDS) + " |",
        "|---|" + "---:|---:|---:|" * len(KINDS),
    ]  # fmt: skip
    for name in sides:
        cells = []
        for kind in KINDS:
            mine, theirs = data["runs"][name][kind], data["runs"][base][kind]
            ratio, low, high = paired(mine, theirs)
            cells += [f"{statistics.median(mine):.1f}",
                      f"{statistics.median(mine) / statistics.median(theirs):.3f}",
                      f"{ratio:.3f} ({low:.3f}-{high:.3f})"]  # fmt: skip
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "Every round, us a request (whole / stream):", ""]
    for name in sides:
        by = data["runs"][name]
        lines.append(f"- {name}: " + " / ".join(
            "[" + ", ".join(f"{v:.0f}" for v in by[k]) + "]" for k in KINDS))  # fmt: skip
    return lines


if __name__ == "__main__":
    main()
