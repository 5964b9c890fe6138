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
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

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
from overhead import load

HERE = Path(__file__).resolve().parent
PROXY_SIDES = ("off", "off2", "on", "on+otel")
LEVERGATE = [sys.executable, "-m", "levergate.cli.main"]


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


def _serve(args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [*LEVERGATE, *args],
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def proxy(rounds: int, seconds: float, folder: Path, concurrency: tuple[int, ...]) -> list[Any]:
    """Each round starts its own gateways: one process's own costs stay with it (the same
    gateway off, kept for 12 rounds at c=1, used 1.09x the CPU of another off, 2026-12-05;
    Python's method cache is keyed by addresses, so each process's heap layout moves its
    count), so they are drawn anew each round and pairing spans them."""
    sim_port, receiver_port = free_port(), free_port()
    sim = _serve(["sim", "--port", str(sim_port)], {})
    receiver = subprocess.Popen([sys.executable, str(HERE / "otel_ab.py"), "--receiver",
                                 str(receiver_port)])  # fmt: skip
    upstream = f"http://127.0.0.1:{sim_port}/v1"

    def logged(path: Path) -> dict[str, str]:
        return {"LEVERGATE_REQUEST_LOG__ENABLED": "true",
                "LEVERGATE_REQUEST_LOG__STORE__SQLITE_PATH": str(path)}  # fmt: skip

    def envs(n: int) -> dict[str, dict[str, str]]:
        return {"off": {}, "off2": {}, "on": logged(folder / f"proxy-{n}.sqlite3"), "on+otel": {
            **logged(folder / f"proxy-otel-{n}.sqlite3"),
            "LEVERGATE_OTEL__ENDPOINT": f"http://127.0.0.1:{receiver_port}",
        }}  # fmt: skip

    rows: list[dict[str, Any]] = []
    gateways: dict[str, subprocess.Popen[bytes]] = {}
    try:
        wait_port(receiver_port, proc=receiver)
        wait_port(sim_port, proc=sim)
        for n in range(rounds):
            ports = {side: free_port() for side in PROXY_SIDES}
            env = envs(n)
            gateways = {
                side: _serve(["serve", "--upstream", upstream, "--port", str(port)], env[side])
                for side, port in ports.items()
            }
            for side, port in ports.items():
                wait_port(port, proc=gateways[side])
            order = turned(PROXY_SIDES, n)
            for c in concurrency:
                rows.extend(
                    {"round": n, "side": side, "concurrency": c,
                     **_loaded(ports[side], gateways[side].pid, c, seconds)}
                    for side in (order if n % 2 == 0 else order[::-1])
                )  # fmt: skip
            for proc in gateways.values():
                stop(proc)
    finally:
        for proc in (*gateways.values(), sim, receiver):
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
    lines = ["", ("Through the proxy: `levergate serve` with the log off, off again (off2: the "
             "A/A, what no change looks like in this run), on, and on with tracing "
             "(every request's spans exported to a receiver in another process that drops them), "
             "side by side in front of one `levergate sim` (0 ms), closed loop, whole answers; the "
             "gateway process's CPU per request from /proc (paired: the median of each round's "
             "own ratio to off); p99 shows the loop's pauses for the log (a batch's turns, a "
             "checkpoint)."), "",
             ("| concurrency | side | p50 ms | / off | p99 ms | / off | CPU us/req | / off "
              "| paired CPU / off (quartiles) |"),
             "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    keys, digits = ("p50_ms", "p99_ms", "cpu_us_per_request"), (3, 3, 1)
    for c in concurrency:
        runs = {s: [r for r in rows if r["side"] == s and r["concurrency"] == c]
                for s in PROXY_SIDES}  # fmt: skip
        med = {s: {k: statistics.median(r[k] for r in runs[s]) for k in keys} for s in runs}
        for side in PROXY_SIDES:
            cells = [f"{med[side][k]:.{n}f} | {med[side][k] / med['off'][k]:.3f}"
                     for k, n in zip(keys, digits, strict=True)]  # fmt: skip
            cpu = [[r["cpu_us_per_request"] for r in runs[s]] for s in (side, "off")]
            ratio, low, high = paired(*cpu)
            lines.append(f"| {c} | {side} | " + " | ".join(cells)
                         + f" | {ratio:.3f} ({low:.3f}-{high:.3f}) |")  # fmt: skip
    return lines


if __name__ == "__main__":
    main()
