"""The long fuzz: levergate.testing.fuzzing's hostile requests (100,000 by default) against a
real `levergate serve` in front of `levergate sim`, several seeds; writes results/fuzz.{json,md}.

    python benchmarks/fuzz.py --count 100000 --seeds 3
    python benchmarks/fuzz.py --smoke
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import Output, add_output_options, free_port, stamp, stop, wait_port

from levergate.testing.fuzzing import SIM_ARGS, fuzz, gateway_config, hostile_requests

LEVERGATE = [sys.executable, "-m", "levergate.cli.main"]
KEY = "lg-fuzz-key"


def run_seed(seed: int, count: int, tmp: Path) -> dict[str, object]:
    sim_port, port = free_port(), free_port()
    sim = subprocess.Popen([*LEVERGATE, "sim", *SIM_ARGS, "--port", str(sim_port)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    log_path = tmp / f"gateway-{seed}.log"
    try:
        wait_port(sim_port, proc=sim)
        config = gateway_config(tmp, sim_port=sim_port, port=port, key=KEY,
                                redis_prefix=f"levergate:fuzz-bench:{seed}:")  # fmt: skip
        with log_path.open("wb") as log:
            gateway = subprocess.Popen([*LEVERGATE, "serve", "--config", str(config)],
                                       stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
        try:
            wait_port(port, proc=gateway)
            started = time.perf_counter()
            report = asyncio.run(
                fuzz("127.0.0.1", port, hostile_requests(seed, key=KEY), count=count)
            )
            seconds = time.perf_counter() - started
            alive = gateway.poll() is None
        finally:
            stop(gateway)
    finally:
        stop(sim)
    text = log_path.read_text(errors="replace")
    return {
        "seed": seed,
        "sent": report.sent,
        "seconds": round(seconds, 1),
        "failures": len(report.failures),
        "first_failures": [f"{why}: {r.method} {r.path}" for r, why in report.failures[:5]],
        "statuses": dict(sorted(report.statuses.items())),
        "gateway_alive": alive,
        "tracebacks": text.count("Traceback"),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--seeds", type=int, default=1)
    add_output_options(parser)
    args = parser.parse_args()
    out = Output.of(args)
    if args.smoke:
        args.count, args.seeds = 200, 1
    tmp = Path(tempfile.mkdtemp())
    rows = [run_seed(seed, args.count, tmp) for seed in range(1, args.seeds + 1)]
    meta = stamp()
    lines = [
        f"# Fuzz ({meta['date']}, {meta['machine']})",
        "",
        "Hostile requests over raw sockets (levergate.testing.fuzzing, fuzz_shapes: deep JSON",
        "to 1,030 levels, embeddings of copies, hostile multipart uploads, every POST route)",
        "against `levergate serve` (auth, exact cache in Redis, Batch API and async requests on)",
        "in front of `levergate sim`. A failure: a 5xx other than 502/504, no status line, or no",
        "answer within 30 s.",
        "",
        "| seed | sent | seconds | failures | gateway alive | tracebacks in log | statuses |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['seed']} | {r['sent']} | {r['seconds']} | {r['failures']} | {r['gateway_alive']} | "
        f"{r['tracebacks']} | {r['statuses']} |"
        for r in rows
    ]
    out.write("fuzz", {**meta, "runs": rows}, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
