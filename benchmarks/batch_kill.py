"""The crash/resume record of the batch runner: a batch run by a real `levergate serve`
process (SQLite) in front of the simulator, killed with SIGKILL at random moments 100 times
and restarted each time; then every line of the output checked against the input.

    PYTHONPATH=src python benchmarks/batch_kill.py [--kills 100] [--lines 2000] [--smoke]

Writes results/batch_kill.{json,md}: kills (and how many landed mid-batch), lines lost,
lines twice in the output, answers that do not match their request, and the upstream calls
made beyond one per line (the duplicates a crash costs: at most kills x concurrency).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import random
import tempfile
from pathlib import Path

from harness import Output, add_output_options, free_port, stamp

from levergate.simulator import LatencySettings, SimSettings, run_simulator
from levergate.testing.batch_crash import (
    Gateway,
    Record,
    check,
    finish,
    kill_loop,
    requests,
    submit,
    write_config,
)

CONCURRENCY = 8


async def main(kills: int, lines_n: int, seed: int, out: Output) -> None:
    latency = LatencySettings(ttft_ms=60.0)
    async with run_simulator(SimSettings(port=0, latency=latency)) as sim:
        with tempfile.TemporaryDirectory() as tmp_dir:
            tmp = Path(tmp_dir)
            port = free_port()
            store = {"backend": "sqlite", "sqlite_path": str(tmp / "batch.sqlite3")}
            config = write_config(
                tmp / "gw.yaml", sim_url=sim.base_url, port=port, store=store,
                files=tmp / "files", concurrency=CONCURRENCY,
            )  # fmt: skip
            gateway = Gateway(config, port, tmp / "gw.log")
            lines = requests(lines_n)
            record = Record()
            await gateway.start()
            try:
                batch_id = await submit(gateway.url, lines)
                await kill_loop([gateway], batch_id=batch_id, kills=kills,
                                rng=random.Random(seed), record=record)  # fmt: skip
                batch, found = await finish(gateway.url, batch_id, seconds=600)
            finally:
                gateway.stop()
            calls = sum(sim.simulator.stats.requests.values())
    check(lines, found, record)
    result = {
        **stamp(), **dataclasses.asdict(record), "status": batch.status,
        "concurrency": CONCURRENCY, "upstream_calls": calls,
        "duplicate_upstream_calls": calls - len(lines),
        "duplicate_bound": kills * CONCURRENCY,
    }  # fmt: skip
    result.pop("statuses", None)
    rows = "\n".join(f"| {k} | {v} |" for k, v in result.items())
    out.write(
        "batch_kill", result, f"# Batch kill-and-resume\n\n| what | value |\n|---|---|\n{rows}\n"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kills", type=int, default=100)
    parser.add_argument("--lines", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=14)
    add_output_options(parser)
    args = parser.parse_args()
    if args.smoke:
        args.kills, args.lines = 2, 40
    asyncio.run(main(args.kills, args.lines, args.seed, Output.of(args)))
