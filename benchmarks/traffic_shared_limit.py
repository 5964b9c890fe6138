"""Shared-limit accuracy: 1, 2 and 4 gateway processes sharing one Redis in front of one
rate-limited provider.

The provider (the simulator, in a process of its own that logs every arrival's time) allows
`--limit` requests per key in any `--window`-second window. Each gateway is a separate
`levergate serve` process with that limit configured for the key, its limit state in Redis
(`traffic.store: redis`), and a closed-loop client pool offering far more than the limit.
Reported per run: the most requests that *reached* the provider in any sliding window (over
the limit means the gateways over-admitted), the provider's 429s, what clients saw, goodput.

For contrast, the same runs with per-process limits (`traffic.store: memory`), which is how a
well-known Python gateway enforces them: the effective limit becomes limit x replicas.

Time is compressed: the default window is 6 s for a provider's minute (scale 10).

    python benchmarks/traffic_shared_limit.py [--quick]

writes benchmarks/results/traffic_shared_limit.json and .md. Needs Redis at 127.0.0.1:6379.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import json
import platform
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp
from harness import Output, add_output_options, free_port
from traffic_common import Outcome as ClientOutcome
from traffic_common import (
    chat_body,
    logged_simulator,
    post_chat,
    process,
    summarize,
)

KEY = "sk-shared"
WORKERS_PER_GATEWAY = 12


def gateway_config(
    sim_url: str,
    *,
    store: str,
    prefix: str,
    limit: int,
    window: float,
    share: float,
    margin: float,
) -> dict[str, Any]:
    return {
        "upstreams": [
            {
                "name": "provider",
                "base_url": sim_url,
                "api_key": KEY,
                "key_limits": {"rpm": limit, "window_seconds": window, "margin": margin},
            }
        ],
        "models": [{"name": "*", "upstream": "provider"}],
        "cache": {"enabled": False},
        # While Redis is unreachable each replica keeps to its share, as a deployer would set.
        "traffic": {"store": store, "redis_prefix": prefix, "seed": 1, "local_share": share},
    }


def count_failovers(workdir: Path) -> int:
    """Outages the gateways logged in this run (their logs are then removed for the next)."""
    count = 0
    for log in workdir.glob("serve-*.log"):
        count += log.read_text().count("fall back to per-process")
        log.unlink()
    return count


def max_in_window(times: list[float], window: float) -> int:
    """The most arrivals in any half-open window (t - window, t]: what a provider counts."""
    ordered = sorted(times)
    return max(
        (i + 1 - bisect.bisect_right(ordered, t - window) for i, t in enumerate(ordered)),
        default=0,
    )


async def one(session: aiohttp.ClientSession, url: str, index: int) -> ClientOutcome:
    issued = time.perf_counter()
    status, _ = await post_chat(session, url, chat_body(index, max_tokens=8), key="sk-client")
    return ClientOutcome(issued, time.perf_counter(), status == 200, int(status == 429))


async def load(urls: list[str], seconds: float) -> list[ClientOutcome]:
    """A closed-loop pool per gateway, all stopping after `seconds`."""
    outcomes: list[ClientOutcome] = []
    stop = time.perf_counter() + seconds
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

        async def worker(url: str, first: int) -> None:
            index = first
            while time.perf_counter() < stop:
                outcomes.append(await one(session, url, index))
                index += 1

        async with asyncio.TaskGroup() as tasks:
            for g, url in enumerate(urls):
                for w in range(WORKERS_PER_GATEWAY):
                    tasks.create_task(worker(url, (g * 100 + w) * 100_000))
    return outcomes


async def run_one(
    *,
    replicas: int,
    store: str,
    limit: int,
    window: float,
    seconds: float,
    margin: float,
    workdir: Path,
) -> dict[str, Any]:
    sim_port = free_port()
    with logged_simulator(port=sim_port, limit=limit, window=window, workdir=workdir) as arrivals:
        prefix = f"bench:{{{uuid.uuid4().hex[:8]}}}:"
        config = gateway_config(
            f"http://127.0.0.1:{sim_port}/v1",
            store=store,
            prefix=prefix,
            limit=limit,
            window=window,
            share=1.0 / replicas,
            margin=margin,
        )
        ports = [free_port() for _ in range(replicas)]
        with contextlib.ExitStack() as stack:
            for port in ports:
                stack.enter_context(process(["serve"], port=port, config=config, workdir=workdir))
            outcomes = await load([f"http://127.0.0.1:{p}/v1" for p in ports], seconds)
    failovers = count_failovers(workdir)
    times = [t for t, _ in arrivals]
    admitted = [t for t, status in arrivals if status == 200]
    summary = summarize(outcomes, skip=window, scale=60.0 / window)
    worst = max_in_window(times, window)
    return {
        "store": store,
        "replicas": replicas,
        "limit": limit,
        "max_arrivals_in_window": worst,
        "max_admitted_in_window": max_in_window(admitted, window),
        "ratio_to_limit": round(worst / limit, 4),
        "provider_429s": sum(1 for _, s in arrivals if s == 429),
        "client_errors": summary["requests"] - summary["succeeded"],
        "client_429s": summary["client_429s"],
        "goodput_share": round(summary["goodput_per_min"] / limit, 3),
        "redis_failovers": failovers,
    }


def report(rows: list[dict[str, Any]], *, window: float, limit: int, seconds: float) -> str:
    lines = [
        "# Shared-limit accuracy",
        "",
        (
            f"One provider key limited to {limit} requests in any {window:g} s window (a minute "
            f"compressed {60 / window:g}x); N `levergate serve` processes with that limit, "
            f"{WORKERS_PER_GATEWAY} closed-loop clients each, {seconds:g} s per run; every "
            f"arrival at the provider logged. Goal with Redis: at most limit x 1.01 in any "
            f"window and no 429 reaching a client. 2 shared CPUs, Python "
            f"{platform.python_version()}, {time.strftime('%Y-%m-%d %H:%M')}."
        ),
        "",
        (
            "| limits | gateways | most arrivals in any window | x limit | provider 429s "
            "| client errors (429s) | goodput / limit | Redis failovers |"
        ),
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        where = "Redis (shared)" if r["store"] == "redis" else "per process"
        lines.append(
            f"| {where} | {r['replicas']} | {r['max_arrivals_in_window']} | "
            f"{r['ratio_to_limit']:.3f} | {r['provider_429s']} | {r['client_errors']} "
            f"({r['client_429s']}) | {r['goodput_share']:.1%} | {r['redis_failovers']} |"
        )
    return "\n".join(lines) + "\n"


async def run_all(args: argparse.Namespace, workdir: Path) -> list[dict[str, Any]]:
    plans = [("redis", 1), ("redis", 2), ("redis", 4), ("memory", 2), ("memory", 4)]
    if args.smoke:
        plans = [("redis", 2)]
    if args.only:
        store, count = args.only.split(":")
        plans = [(store, int(count))]
    rows = []
    for store, replicas in plans:
        row = await run_one(
            replicas=replicas,
            store=store,
            limit=args.limit,
            window=args.window,
            seconds=args.seconds,
            margin=args.margin,
            workdir=workdir,
        )
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=500)
    parser.add_argument("--window", type=float, default=6.0)
    parser.add_argument("--margin", type=float, default=0.01, help="key_limits.margin")
    parser.add_argument("--seconds", type=float, default=None)
    parser.add_argument("--quick", action="store_true", help="3 windows per run instead of 5")
    parser.add_argument("--only", default=None, help="one run, e.g. redis:4")
    parser.add_argument("--logs", type=Path, default=None, help="keep the gateways' logs here")
    add_output_options(parser)
    args = parser.parse_args()
    out = Output.of(args)
    if args.smoke:  # two gateways on Redis, a one-second window of 40, two windows
        args.limit, args.window, args.seconds = 40, 1.0, 2.0
    if args.seconds is None:
        args.seconds = args.window * (3 if args.quick else 5)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = args.logs or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        rows = asyncio.run(run_all(args, workdir))
    if args.only:
        return
    meta = {"limit": args.limit, "window_seconds": args.window, "seconds": args.seconds}
    text = report(rows, window=args.window, limit=args.limit, seconds=args.seconds)
    out.write("traffic_shared_limit", {**meta, "rows": rows}, text)


if __name__ == "__main__":
    main()
