"""The Go article's table, reproduced on the simulator, time-compressed.

The article (4 cores, one API key limited to ~500 RPM, N independent prompts) reported:

    naive sequential           60 req/min   p99 2.1 s
    goroutine per request     450 req/min   p99 4.2 s
    batched + connection pool 490 req/min   p99 1.8 s
    multi-key load balanced  1500+ req/min  p99 1.9 s

Here the provider is `levergate sim` with a per-key sliding-window limit of 500 requests per
"minute" and answers of ~1 s (300 ms TTFT, 50 tokens at 75 tokens/s, log-normal jitter 0.3).
Time is compressed by `--scale` (default 10): the minute is 6 s, the answer ~100 ms; rates and
latencies below are converted back to the uncompressed timeline.

    (a) naive sequential      one request at a time, straight to the provider
    (b) a task per request    every prompt launched at once straight to the provider, no
                              limiter; 429s retried after retry-after-ms, as the OpenAI SDK does
    (c) levergate, one key    a bounded client pool (Little's law: 1.25 x rate x latency) through
                              `levergate serve` with the key's limit configured: GCRA pacing,
                              priority queue, pooled keep-alive connections, retries
    (c') the same, open loop  arrivals at 95% of the limit (wrk2-style), no coordinated omission
    (d) levergate, 3 keys     three times the pool, the gateway balancing over three keys (P2C)

Goodput counts completions after the first window (a fresh provider window hands out a one-off
burst of 500 that no sustained workload gets); latency is from the moment the client issues a
request (for (b): from launch, retries included) to its answer.

    python benchmarks/traffic_go_table.py [--quick] [--scale 10]
    python benchmarks/traffic_go_table.py --smoke   # a 60 RPM key, time x60, seconds

writes benchmarks/results/traffic_go_table.json and .md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import platform
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
from harness import Output, add_output_options, free_port
from traffic_common import (
    Outcome,
    chat_body,
    control,
    cpu_seconds,
    post_chat,
    process,
    sleep_until,
    summarize,
)

ARTICLE = {
    "a": ("naive sequential", 60, 2.1),
    "b": ("goroutine per request", 450, 4.2),
    "c": ("batched + connection pool", 490, 1.8),
    "d": ("multi-key load balanced", 1500, 1.9),
}
LIMIT = 500  # requests per minute per key
KEYS = ("sk-bench-0", "sk-bench-1", "sk-bench-2")
TTFT_S, TOKENS, TOKENS_PER_S, JITTER = 0.3, 50, 75.0, 0.3
MEAN_LATENCY_S = (TTFT_S + (TOKENS - 1) / TOKENS_PER_S) * math.exp(JITTER**2 / 2)


def sim_config(scale: float, limit: int) -> dict[str, Any]:
    return {
        "seed": 1,
        "latency": {
            "ttft_ms": TTFT_S * 1000 / scale,
            "tokens_per_second": TOKENS_PER_S * scale,
            "jitter": JITTER,
        },
        "limits": {"rpm": limit, "window_seconds": 60.0 / scale},
    }


def gateway_config(
    sim_url: str, *, keys: tuple[str, ...], scale: float, limit: int
) -> dict[str, Any]:
    return {
        "upstreams": [
            {
                "name": "provider",
                "base_url": sim_url,
                "api_keys": list(keys),
                "key_limits": {"rpm": limit, "window_seconds": 60.0 / scale},
            }
        ],
        "models": [{"name": "*", "upstream": "provider"}],
        "cache": {"enabled": False},
        "traffic": {"seed": 1},
    }


async def one(session: aiohttp.ClientSession, url: str, index: int, *, key: str) -> Outcome:
    """One request with no retry: what a caller of the gateway sees."""
    issued = time.perf_counter()
    status, _ = await post_chat(session, url, chat_body(index, max_tokens=TOKENS), key=key)
    return Outcome(issued, time.perf_counter(), status == 200, client_429s=int(status == 429))


async def with_sdk_retries(session: aiohttp.ClientSession, url: str, index: int) -> Outcome:
    """A direct call that retries 429s after `retry-after-ms` (the SDK's behaviour)."""
    issued = time.perf_counter()
    seen = 0
    for attempt in range(1, 41):
        status, headers = await post_chat(
            session, url, chat_body(index, max_tokens=TOKENS), key=KEYS[0]
        )
        if status != 429:
            return Outcome(issued, time.perf_counter(), status == 200, seen, attempt)
        seen += 1
        wait = float(headers.get("retry-after-ms", "1000")) / 1000
        await asyncio.sleep(wait)
    return Outcome(issued, time.perf_counter(), ok=False, client_429s=seen, attempts=40)


async def closed_loop(
    workers: int, total: int, call: Callable[[int], Awaitable[Outcome]]
) -> list[Outcome]:
    outcomes: list[Outcome] = []
    counter = iter(range(total))

    async def worker() -> None:
        outcomes.extend([await call(index) for index in counter])

    async with asyncio.TaskGroup() as tasks:
        for _ in range(workers):
            tasks.create_task(worker())
    return outcomes


async def open_loop(
    rate: float, total: int, call: Callable[[int], Awaitable[Outcome]]
) -> list[Outcome]:
    outcomes: list[Outcome] = []
    start = time.perf_counter()

    async def launch(index: int) -> None:
        outcomes.append(await call(index))

    async with asyncio.TaskGroup() as tasks:
        for index in range(total):
            await sleep_until(start + index / rate)
            tasks.create_task(launch(index))
    return outcomes


async def measure(
    row: str,
    run: Callable[[], Awaitable[list[Outcome]]],
    *,
    sim_url: str,
    scale: float,
    skip: float,
    gateway: int | None,
) -> dict[str, Any]:
    await control(sim_url, "POST", "/sim/reset")
    cpu = cpu_seconds(gateway) if gateway else 0.0
    started = time.perf_counter()
    outcomes = await run()
    wall = time.perf_counter() - started
    stats = await control(sim_url, "GET", "/sim/stats")
    attempts = stats["requests_by_endpoint"].get("/v1/chat/completions", 0)
    summary = summarize(outcomes, skip=skip, scale=scale)
    summary.update(
        row=row,
        upstream_429s=stats["rate_limited"],
        attempts_per_request=round(attempts / len(outcomes), 3),
        gateway_cpu_share=round((cpu_seconds(gateway) - cpu) / wall, 3) if gateway else None,
    )
    print(json.dumps(summary), flush=True)
    return summary


async def run_all(
    scale: float, windows: float, workdir: Path, *, limit: int = LIMIT
) -> list[dict[str, Any]]:
    window = 60.0 / scale
    rate = limit / window  # the key's limit, per real second
    pool = pool_size(limit)
    n = int(limit * windows)
    ports = [free_port() for _ in range(3)]
    sim_url = f"http://127.0.0.1:{ports[0]}/v1"
    configs = [gateway_config(sim_url, keys=KEYS[:1], scale=scale, limit=limit)]
    configs.append(gateway_config(sim_url, keys=KEYS, scale=scale, limit=limit))
    rows: list[dict[str, Any]] = []
    with (
        process(["sim"], port=ports[0], config=sim_config(scale, limit), workdir=workdir),
        process(["serve"], port=ports[1], config=configs[0], workdir=workdir) as gw1,
        process(["serve"], port=ports[2], config=configs[1], workdir=workdir) as gw3,
    ):
        one_key, three_keys = (f"http://127.0.0.1:{port}/v1" for port in ports[1:])
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as s:

            def direct(i: int) -> Awaitable[Outcome]:
                return one(s, sim_url, i, key=KEYS[0])

            def sdk(i: int) -> Awaitable[Outcome]:
                return with_sdk_retries(s, sim_url, i)

            def via(url: str) -> Callable[[int], Awaitable[Outcome]]:
                return lambda i: one(s, url, i, key="sk-client")

            plans: list[tuple[str, Callable[[], Awaitable[list[Outcome]]], float, int | None]] = [
                ("a", lambda: closed_loop(1, int(30 * windows), direct), 0.0, None),
                ("b", lambda: open_loop(1.2 * rate, int(1.2 * n), sdk), window, None),
                ("c", lambda: closed_loop(pool, n, via(one_key)), window, gw1.pid),
                ("c'", lambda: open_loop(0.95 * rate, n, via(one_key)), window, gw1.pid),
                ("d", lambda: closed_loop(3 * pool, 3 * n, via(three_keys)), window, gw3.pid),
            ]
            for row, run, skip, gateway in plans:
                rows.append(
                    await measure(
                        row, run, sim_url=sim_url, scale=scale, skip=skip, gateway=gateway
                    )
                )
    return rows


def pool_size(limit: int = LIMIT) -> int:
    """Little's law with 25% headroom: the requests in flight that sustain the key's limit."""
    return math.ceil(1.25 * limit / 60 * MEAN_LATENCY_S)


def report(
    rows: list[dict[str, Any]], *, scale: float, windows: float, pool: int, limit: int = LIMIT
) -> str:
    by = {r["row"]: r for r in rows}
    names = {
        "a": "(a) naive sequential",
        "b": "(b) a task per request, no limiter (arrivals at 1.2x the limit)",
        "c": f"(c) levergate: pool of {pool}, rate-limited, pooled",
        "c'": "(c') levergate, open loop at 95% of the limit",
        "d": f"(d) levergate: pool of {3 * pool}, 3 keys balanced",
    }
    lines = [
        "# The Go article's table on the simulator",
        "",
        (
            f"Scale factor {scale:g} (a 60 s rate window runs in {60 / scale:g} s; "
            f"an answer of ~1 s in ~{1000 / scale:.0f} ms); {windows:g} windows of load per key; "
            f"one key limited to {limit} requests per sliding minute; numbers converted back "
            f"to the uncompressed timeline. 2 shared CPUs ({platform.python_implementation()} "
            f"{platform.python_version()}), {time.strftime('%Y-%m-%d %H:%M')}."
        ),
        "",
        (
            "| configuration | goodput req/min | article | p50 | p99 | article p99 "
            "| 429s to client | 429s upstream | attempts/request |"
        ),
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for key, label in names.items():
        r = by[key]
        article = ARTICLE.get(key[0])
        lines.append(
            f"| {label} | {r['goodput_per_min']:,.0f} | {article[1] if article else '-'} "
            f"| {r['p50_s']:.2f} s | {r['p99_s']:.2f} s | {article[2] if article else '-'} s "
            f"| {r['client_429s']} | {r['upstream_429s']} | {r['attempts_per_request']:.2f} |"
        )
    c, d = by["c"], by["d"]
    lines += [
        "",
        (
            f"Goals: (c) goodput {c['goodput_per_min'] / limit:.1%} of the key's limit "
            f"(goal >= 97%) with {c['client_429s']} 429s reaching the client (goal 0); (d) = "
            f"{d['goodput_per_min'] / max(c['goodput_per_min'], 1e-9):.2f} x (c) (goal >= 2.9); "
            f"p99 (c) {c['p99_s']:.2f} s vs 1.8 s, (d) {d['p99_s']:.2f} s vs 1.9 s."
        ),
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 windows per row instead of 4")
    parser.add_argument("--scale", type=float, default=10.0, help="time compression factor")
    add_output_options(parser)
    args = parser.parse_args()
    out = Output.of(args)
    windows, limit = (2.0 if args.quick else 4.0), LIMIT
    if args.smoke:  # a 60-per-minute key, the minute a second: every row in a few seconds
        windows, limit, args.scale = 1.5, 60, 60.0
    with tempfile.TemporaryDirectory() as tmp:
        rows = asyncio.run(run_all(args.scale, windows, Path(tmp), limit=limit))
    pool = pool_size(limit)
    meta = {"scale": args.scale, "windows": windows, "limit_rpm": limit, "pool": pool}
    text = report(rows, scale=args.scale, windows=windows, pool=pool, limit=limit)
    out.write("traffic_go_table", {**meta, "rows": rows}, text)


if __name__ == "__main__":
    main()
