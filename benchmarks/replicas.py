"""Three `levergate serve` replicas behind a real HAProxy, sharing Redis and PostgreSQL through
`stores.default`, with `levergate sim` as the provider (the rig of tests/e2e/test_replicas.py,
run longer): each shared rate limit (RPM, then TPM) at 3x offered load (upstream requests, and
the simulator's own 429s at 1.02x the limit), a Batch API job with one replica SIGKILLed
mid-job, and a rolling restart plus a SIGHUP reload of each replica under steady load.

    PYTHONPATH=src python benchmarks/replicas.py [--windows 5] [--lines 1000] [--replicas 3]
    PYTHONPATH=src python benchmarks/replicas.py --smoke     # two replicas, 2 s a limit, 30 lines,
                                                             # one rolling restart

Writes results/replicas.{json,md}. Needs Redis, PostgreSQL and haproxy.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import shutil
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from harness import Output, add_output_options, missing, stamp

from levergate.testing import replicas_checks as checks
from levergate.testing.replicas import deployment

POSTGRES = os.environ.get("LEVERGATE_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432")
# A smoke run's limit phases: 2 s of a 10 s window. The shared limits admit at their rate with a
# small burst (4 s at 3x it: 42 of 120 admitted), so load at 3x is shed from the first second.
SMOKE_SECONDS = 2.0


@asynccontextmanager
async def postgres_database(name: str) -> AsyncIterator[str]:
    """A fresh database for the run's job store, dropped afterwards."""
    import psycopg

    name = f"{name}_{os.getpid()}"
    try:
        admin = await psycopg.AsyncConnection.connect(f"{POSTGRES}/postgres", autocommit=True,
                                                      connect_timeout=3)  # fmt: skip
    except psycopg.Error as exc:
        missing(f"PostgreSQL is required and not reachable at {POSTGRES}: {exc}")
        raise
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.execute(f'CREATE DATABASE "{name}"')
        yield f"{POSTGRES}/{name}"
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


async def limits(
    tmp: Path, dsn: str, windows: int, replicas: int, *, seconds: float | None
) -> list[dict[str, Any]]:
    async with deployment(tmp, dsn, sim_flags=checks.SIM_LIMITS, key_limits=checks.KEY_LIMITS,
                          replicas=replicas) as d:  # fmt: skip
        phases = await checks.shared_limits(d, windows=windows, seconds=seconds)
    return [{"limit": p.limit, "value": checks.KEY_LIMITS[p.limit],
             "window_seconds": checks.WINDOW, "windows": windows,
             "seconds": seconds or windows * checks.WINDOW, "offered": p.load.offered,
             "admitted": p.load.ok, "shed": p.load.limited,
             "client_failures": len(p.load.failures), "upstream_requests": p.upstream_requests,
             "upstream_429s_at_1_02x": p.upstream_429s} for p in phases]  # fmt: skip


async def resilience(
    tmp: Path, dsn: str, lines: int, replicas: int, *, restarts: int | None
) -> dict[str, Any]:
    async with deployment(tmp, dsn, sim_flags=("--ttft-ms", "20", "--tokens-per-second", "200"),
                          replicas=replicas) as d:  # fmt: skip
        record = await checks.batch_with_a_kill(d, lines=lines)
        load = await checks.rolling_restart(d, restarts=restarts)
    return {"batch": dataclasses.asdict(record) | {"statuses": dict(record.statuses)},
            "rolling_restart": {"requests": load.offered, "ok": load.ok,
                                "failed": len(load.failures),
                                "examples": load.failures[:3]}}  # fmt: skip


async def main(args: argparse.Namespace, out: Output) -> None:
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        (tmp / "a").mkdir()
        (tmp / "b").mkdir()
        async with postgres_database("levergate_bench_replicas") as dsn:
            shared = await limits(tmp / "a", dsn, args.windows, args.replicas,
                                  seconds=SMOKE_SECONDS if args.smoke else None)  # fmt: skip
        async with postgres_database("levergate_bench_replicas_roll") as dsn:
            rest = await resilience(tmp / "b", dsn, args.lines, args.replicas,
                                    restarts=1 if args.smoke else None)  # fmt: skip
    data = {**stamp(), "replicas": args.replicas, "limits": shared, **rest}
    batch, roll = rest["batch"], rest["rolling_restart"]
    rows = [
        f"| {p['limit']} | {p['value']} / {p['window_seconds']:g} s | {p['seconds']:g} s | "
        f"{p['offered']} | {p['admitted']} | {p['shed']} | {p['client_failures']} | "
        f"{p['upstream_requests']} | {p['upstream_429s_at_1_02x']} |"
        for p in shared
    ]
    markdown = "\n".join([
        f"# {args.replicas} replicas behind HAProxy (Redis + PostgreSQL via stores.default)", "",
        ("Each shared limit at 3x its rate, through the balancer. The simulator enforces 1.02x "
        "the limit on its own sliding window: its 429s count windows where the replicas "
        "together let more through."), "",
        ("| limit | value | load for | offered | admitted | shed | failed | upstream requests "
        "| upstream 429s at 1.02x |"),
        "|---|---|---|---|---|---|---|---|---|", *rows, "",
        (f"Batch of {batch['lines']} lines, one replica SIGKILLed mid-job "
        f"({batch['kills_mid_batch']} mid-batch): lost {batch['lost']}, duplicated "
        f"{batch['duplicated_in_output']}, mismatched {batch['mismatched']}."), "",
        (f"Rolling restart (SIGTERM each replica in turn) then SIGHUP reload of each, under "
        f"steady load: {roll['requests']} requests, {roll['failed']} failed."), "",
    ])  # fmt: skip
    out.write("replicas", data, markdown)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--windows", type=int, default=5)
    parser.add_argument("--lines", type=int, default=1000)
    parser.add_argument("--replicas", type=int, default=3)
    add_output_options(parser)
    args = parser.parse_args()
    if shutil.which("haproxy") is None and not Path("/usr/sbin/haproxy").exists():
        missing("haproxy is required and not installed (apt-get install -y haproxy)")
    if args.smoke:
        args.windows, args.lines, args.replicas = 1, 30, 2
    asyncio.run(main(args, Output.of(args)))
