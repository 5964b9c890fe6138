"""Interactive latency while a batch flood saturates a rate-limited provider (issue 4, item 2).

`levergate sim` limits one key to 300 requests per sliding window; `levergate serve` in front
of it enforces the same limit (GCRA pacing, priority queue). Time is compressed by `--scale`
(default 10): the 60 s window runs in 6 s, so the key allows 50 requests per real second.
Latencies below are real milliseconds, not scaled back.

    alone              interactive requests only (open loop, Poisson, 10% of the limit)
    flood, priority    the same, while `FLOOD` batch-priority clients (closed loop) keep a
                       backlog of that many requests queued at the gateway
                       (x-levergate-priority: batch vs interactive)
    flood, no classes  the contrast: flood and interactive requests both without the header,
                       so both are `default` and the queue is first come, first served

Each scenario gets a fresh simulator and gateway. The flood starts a window before the
interactive requests (the backlog builds and the provider's window fills) and outlasts them,
so no interactive request is measured on an idle gateway. Latency counts from each request's
intended send time (`levergate.bench`, open loop: no coordinated omission).

    python benchmarks/traffic_priority.py [--quick] [--scale 10]

writes benchmarks/results/traffic_priority.json and .md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import Output, add_output_options, free_port
from traffic_common import control, process

from levergate.bench import BenchConfig, BenchResult, run_bench

LIMIT = 300  # requests per window per key
FLOOD = 300  # batch requests kept queued: a FIFO wait of one window
INTERACTIVE_SHARE = 0.1  # of the limit
TTFT_MS, TOKENS, TOKENS_PER_S = 100.0, 32, 400.0
PRIORITY = "x-levergate-priority"
SCENARIOS: dict[str, tuple[str | None, str | None, bool]] = {
    # name: (interactive header, flood header, flood on)
    "alone": ("interactive", None, False),
    "flood, priority": ("interactive", "batch", True),
    "flood, no classes": (None, None, True),
}


@dataclass(frozen=True)
class Load:
    """The key's limit, the flood, the time compression and the interactive run's length."""

    scale: float = 10.0
    seconds: float = 60.0
    limit: int = LIMIT
    flood: int = FLOOD

    @property
    def window(self) -> float:
        return 60.0 / self.scale


def sim_config(load: Load) -> dict[str, Any]:
    return {
        "seed": 1,
        "latency": {"ttft_ms": TTFT_MS, "tokens_per_second": TOKENS_PER_S, "jitter": 0.2},
        "limits": {"rpm": load.limit, "window_seconds": load.window},
    }


def gateway_config(sim_url: str, load: Load) -> dict[str, Any]:
    return {
        "upstreams": [
            {
                "name": "provider",
                "base_url": sim_url,
                "api_key": "sk-bench",
                "key_limits": {"rpm": load.limit, "window_seconds": load.window},
            }
        ],
        "models": [{"name": "*", "upstream": "provider"}],
        "cache": {"enabled": False},
        "traffic": {"seed": 1},
    }


def headers(priority: str | None) -> tuple[tuple[str, str], ...]:
    return ((PRIORITY, priority),) if priority else ()


async def scenario(name: str, *, load: Load, workdir: Path) -> dict[str, Any]:
    interactive_class, flood_class, flooded = SCENARIOS[name]
    window, seconds = load.window, load.seconds
    sim_port, gw_port = free_port(), free_port()
    sim_url = f"http://127.0.0.1:{sim_port}/v1"
    url = f"http://127.0.0.1:{gw_port}"
    warmup = window if flooded else 0.0
    probe = BenchConfig(
        url=url,
        rate=INTERACTIVE_SHARE * load.limit / window,
        arrival="poisson",
        duration_s=seconds,
        max_tokens=TOKENS,
        prompt_tokens=64,
        headers=headers(interactive_class),
        seed=1,
    )
    flood = BenchConfig(
        url=url,
        concurrency=load.flood,
        # Outlasts the interactive run and its drain (one FIFO wait at most).
        duration_s=warmup + seconds + 2 * window,
        drain_timeout_s=0.0,
        max_tokens=TOKENS,
        prompt_tokens=64,
        headers=headers(flood_class),
        seed=2,
    )
    with (
        process(["sim"], port=sim_port, config=sim_config(load), workdir=workdir),
        process(["serve"], port=gw_port, config=gateway_config(sim_url, load), workdir=workdir),
    ):
        async with asyncio.TaskGroup() as tasks:
            flooding = tasks.create_task(run_bench(flood)) if flooded else None
            await asyncio.sleep(warmup)
            interactive = await run_bench(probe)
        stats = await control(sim_url, "GET", "/sim/stats")
    return summary(name, interactive, flooding.result() if flooding else None, stats, load)


def summary(
    name: str,
    interactive: BenchResult,
    flood: BenchResult | None,
    stats: dict[str, Any],
    load: Load,
) -> dict[str, Any]:
    total = interactive.total_ms
    row = {
        "scenario": name,
        "interactive_requests": interactive.sent,
        "interactive_ok": interactive.ok,
        "interactive_errors": interactive.errors,
        "interactive_p50_ms": round(total.get("p50", float("nan")), 1),
        "interactive_p99_ms": round(total.get("p99", float("nan")), 1),
        "interactive_max_ms": round(total.get("max", float("nan")), 1),
        "flood_ok": flood.ok if flood else 0,
        "flood_errors": flood.errors if flood else {},
        "flood_ok_per_s": round(flood.ok / flood.elapsed_s, 1) if flood else 0.0,
        "limit_per_s": round(load.limit / load.window, 1),
        "upstream_429s": stats["rate_limited"],
    }
    print(json.dumps(row), flush=True)
    return row


def report(rows: list[dict[str, Any]], load: Load) -> str:
    window, scale, seconds, limit = load.window, load.scale, load.seconds, load.limit
    lines = [
        "# Interactive latency under a batch flood",
        "",
        (
            f"One key limited to {limit} requests per {window:g} s window ({limit / window:g}/s; "
            f"time compressed {scale:g}x from a 60 s window); answers ~{TTFT_MS:.0f} ms TTFT + "
            f"{TOKENS} tokens at {TOKENS_PER_S:.0f}/s. Interactive: open loop, Poisson, "
            f"{INTERACTIVE_SHARE:.0%} of the limit for {seconds:g} s. Flood: {load.flood} "
            "closed-loop clients. Real milliseconds from the intended send time. 2 shared CPUs, "
            f"loaded by other work: numbers are provisional ({platform.python_implementation()} "
            f"{platform.python_version()}, {time.strftime('%Y-%m-%d %H:%M')})."
        ),
        "",
        (
            "| scenario | interactive ok/sent | p50 ms | p99 ms | max ms | errors "
            "| flood ok/s | 429s upstream |"
        ),
        "|---|---:|---:|---:|---:|---|---:|---:|",
    ]
    for r in rows:
        errors = ", ".join(f"{k}: {v}" for k, v in r["interactive_errors"].items()) or "0"
        lines.append(
            f"| {r['scenario']} | {r['interactive_ok']}/{r['interactive_requests']} "
            f"| {r['interactive_p50_ms']:.0f} | {r['interactive_p99_ms']:.0f} "
            f"| {r['interactive_max_ms']:.0f} | {errors} | {r['flood_ok_per_s']:g} "
            f"| {r['upstream_429s']} |"
        )
    by = {r["scenario"]: r for r in rows}
    alone, ours, fifo = (by[name]["interactive_p99_ms"] for name in SCENARIOS)
    lines += [
        "",
        (
            f"Interactive p99: {alone:.0f} ms alone, {ours:.0f} ms under the flood with priority "
            f"classes ({ours / alone:.2f}x), {fifo:.0f} ms under the same flood without them "
            f"({fifo / alone:.1f}x)."
        ),
    ]
    return "\n".join(lines) + "\n"


async def run_all(load: Load, workdir: Path) -> list[dict[str, Any]]:
    return [await scenario(name, load=load, workdir=workdir) for name in SCENARIOS]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="20 s of interactive load, not 60")
    parser.add_argument("--scale", type=float, default=10.0, help="time compression factor")
    add_output_options(parser)
    args = parser.parse_args()
    out = Output.of(args)
    load = Load(scale=args.scale, seconds=20.0 if args.quick else 60.0)
    if args.smoke:  # a half-second window of 30 requests, a flood of 30, one second of probes
        load = Load(scale=120.0, seconds=1.0, limit=30, flood=30)
    with tempfile.TemporaryDirectory() as tmp:
        rows = asyncio.run(run_all(load, Path(tmp)))
    meta = {"scale": load.scale, "seconds": load.seconds, "limit": load.limit, "flood": load.flood}
    out.write("traffic_priority", {**meta, "rows": rows}, report(rows, load))


if __name__ == "__main__":
    main()
