"""`levergate serve --workers N`: requests per second at 1 and 2 workers, as a ratio, and what
sharing a rate limit between workers through SQLite costs.

Every variant is a real `levergate serve` in front of the same `levergate sim` (one process,
zero simulated latency), loaded by wrk (closed loop, one thread, 64 keep-alive connections,
small non-streaming chat completions), in alternating rounds so that a change in the machine's
load falls on every variant alike; the medians over rounds are compared within this run:

    w1                one process (the default)
    w2                two workers on one port
    w1-limit-memory   one process with an RPM limit (never reached) kept in memory
    w1-limit-sqlite   the same limit in the SQLite file workers share (traffic.store: sqlite)
    w2-limit-sqlite   two workers sharing that limit (what `--workers 2` does on its own)

The gateway, the simulator and wrk share the machine's cores, so the 2-worker figure is what a
second worker gets from a machine that also carries its load generator and upstream: on a
machine where those live elsewhere the ratio is higher. Other work on the machine (its load
average is recorded before each measurement) lowers every variant; alternating keeps the ratio
fair, not the absolute figures.

    python benchmarks/workers.py [--duration 8] [--rounds 3] [--connections 64]
    python benchmarks/workers.py --smoke

writes benchmarks/results/workers.json and .md. Needs `wrk` (apt-get install -y wrk).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness import Output, add_output_options, free_port, need_tool, stamp, stop, wait_http

LEVERGATE = [sys.executable, "-m", "levergate.cli.main"]
VARIANTS: dict[str, tuple[int, str | None]] = {  # name: (workers, limit store)
    "w1": (1, None),
    "w2": (2, None),
    "w1-limit-memory": (1, "memory"),
    "w1-limit-sqlite": (1, "sqlite"),
    "w2-limit-sqlite": (2, "sqlite"),
}
SMOKE_VARIANTS = ("w1", "w2")
BODY = (
    '{"model":"m","messages":[{"role":"user","content":"Say hello to the benchmark."}],'
    '"max_tokens":16}'
)
LUA = f"""wrk.method = "POST"
wrk.body = '{BODY}'
wrk.headers["Content-Type"] = "application/json"
"""


def config(folder: Path, *, sim_port: int, store: str | None) -> Path:
    limits = "    key_limits: {rpm: 100000000}\n" if store else ""
    traffic = f"traffic: {{store: {store}}}\n" if store else ""
    path = folder / f"levergate-{store}.yaml"
    path.write_text(
        "upstreams:\n"
        f"  - name: sim\n    base_url: http://127.0.0.1:{sim_port}/v1\n    api_key: sk-bench\n"
        f"{limits}models:\n  - {{name: m, upstream: sim}}\ncache: {{enabled: false}}\n{traffic}"
    )
    return path


def environment(folder: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEVERGATE_")}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    env["XDG_CACHE_HOME"] = str(folder / "cache")
    return env


def start_gateway(
    folder: Path, *, sim_port: int, workers: int, store: str | None
) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    log = folder / f"serve-{port}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [*LEVERGATE, "serve", "--config", str(config(folder, sim_port=sim_port, store=store)),
             "--port", str(port), "--workers", str(workers)],
            env=environment(folder), stdout=subprocess.DEVNULL, stderr=out,
        )  # fmt: skip
    deadline = time.monotonic() + 120
    while "serving on" not in log.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            stop(proc)
            raise RuntimeError(f"the gateway did not start: {log.read_text(errors='replace')}")
        time.sleep(0.1)
    return proc, port


def wrk(port: int, *, duration: int, connections: int, script: Path) -> dict[str, Any]:
    load = os.getloadavg()[0]
    out = subprocess.run(
        ["wrk", "-t1", f"-c{connections}", f"-d{duration}s", "-s", str(script),
         f"http://127.0.0.1:{port}/v1/chat/completions"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    errors = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    socket_errors = re.search(r"Socket errors:.*", out)
    if rps is None:
        raise RuntimeError(f"wrk printed no rate:\n{out}")
    return {
        "rps": float(rps.group(1)),
        "non_2xx": int(errors.group(1)) if errors else 0,
        "socket_errors": socket_errors.group(0) if socket_errors else "",
        "load_before": round(load, 2),
    }


def measure(args: argparse.Namespace, folder: Path, names: list[str]) -> dict[str, list[Any]]:
    script = folder / "post.lua"
    script.write_text(LUA)
    sim_port = free_port()
    sim = subprocess.Popen(
        [*LEVERGATE, "sim", "--port", str(sim_port)], env=environment(folder),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    runs: dict[str, list[Any]] = {name: [] for name in names}
    try:
        wait_http(f"http://127.0.0.1:{sim_port}/v1/models")
        for round_ in range(args.rounds):
            order = names if round_ % 2 == 0 else list(reversed(names))
            for name in order:
                workers, store = VARIANTS[name]
                proc, port = start_gateway(folder, sim_port=sim_port, workers=workers, store=store)
                try:
                    wrk(port, duration=1, connections=args.connections, script=script)  # warm-up
                    result = wrk(port, duration=args.duration, connections=args.connections,
                                 script=script)  # fmt: skip
                finally:
                    stop(proc, seconds=30)
                result["round"] = round_
                runs[name].append(result)
                print(f"round {round_} {name}: {result['rps']:.0f} req/s "
                      f"(load {result['load_before']})", file=sys.stderr)  # fmt: skip
    finally:
        stop(sim)
    return runs


RATIOS = (
    ("w2", "w1"),
    ("w1-limit-sqlite", "w1-limit-memory"),
    ("w2-limit-sqlite", "w1-limit-memory"),
    ("w2-limit-sqlite", "w2"),
)


def paired(runs: dict[str, list[Any]], top: str, bottom: str) -> float:
    """The median over rounds of each round's ratio: the two were measured minutes apart at
    most, so a change in the machine's load between rounds cancels out."""
    return float(
        statistics.median(a["rps"] / b["rps"] for a, b in zip(runs[top], runs[bottom], strict=True))
    )


def report(runs: dict[str, list[Any]], args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    medians = {name: statistics.median(r["rps"] for r in rs) for name, rs in runs.items()}
    ratios = {
        f"{top} / {bottom}": paired(runs, top, bottom)
        for top, bottom in RATIOS
        if top in runs and bottom in runs
    }
    loads = [r["load_before"] for rs in runs.values() for r in rs]
    data = {
        **stamp(),
        "cores": os.cpu_count(),
        "duration_seconds": args.duration,
        "rounds": args.rounds,
        "connections": args.connections,
        "median_rps": {k: round(v, 1) for k, v in medians.items()},
        "ratios": {k: round(v, 3) for k, v in ratios.items()},
        "load_average_range": [min(loads), max(loads)],
        "runs": runs,
    }
    lines = [
        "# `levergate serve --workers N`: requests per second", "",
        (f"{data['date']}, {data['machine']}. wrk, one thread, {args.connections} keep-alive "
         f"connections, {args.duration} s per measurement after a 1 s warm-up, {args.rounds} "
         "alternating rounds; gateway, `levergate sim` (one process) and wrk on the same cores."),
        "", "| variant | median req/s | each round | non-2xx |", "|---|---:|---|---:|",
    ]  # fmt: skip
    for name, rs in runs.items():
        each = ", ".join(f"{r['rps']:.0f}" for r in rs)
        lines.append(f"| {name} | {medians[name]:.0f} | {each} | {sum(r['non_2xx'] for r in rs)} |")
    lines += ["", "| ratio (median of the rounds' own ratios) | value |", "|---|---:|"]
    lines += [f"| {k} | {v:.2f} |" for k, v in ratios.items()]
    lines += [
        "",
        (
            f"Load average (1 min) before the measurements: {min(loads):.1f} to {max(loads):.1f} "
            f"on {os.cpu_count()} cores: other work shared the machine during this run (other "
            "sessions were running tests and benchmarks), which lowers every variant; the ratios "
            "compare variants measured in alternation under the same conditions."
        ),
        "",
    ]
    return data, "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--only", nargs="*", choices=list(VARIANTS), default=None)
    add_output_options(parser)
    args = parser.parse_args()
    output = Output.of(args)
    need_tool("wrk")
    names = list(args.only or VARIANTS)
    if args.smoke:
        args.duration, args.rounds, args.connections = 1, 1, 8
        names = list(SMOKE_VARIANTS)
    with tempfile.TemporaryDirectory(prefix="levergate-workers-") as tmp:
        runs = measure(args, Path(tmp), names)
    data, markdown = report(runs, args)
    output.write("workers", data, markdown)


if __name__ == "__main__":
    main()
