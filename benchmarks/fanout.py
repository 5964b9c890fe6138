"""Fan-out of N independent prompts against a rate-limited provider, three ways, in one run:

    (a) sequential          one `await` after another: the official OpenAI SDK straight to the
                            provider
    (b) unbounded gather    `asyncio.gather` of every prompt at once through the SDK, with its
                            default retries (2 more tries after a 429, waiting `retry-after-ms`);
                            what is still refused then is an error
    (c) gw.map              `Gateway.map(prompts, max_concurrency=...)` in-process, the
                            provider's limit configured on the key: the gateway's limiter paces

The provider is the simulator with a limit of 600 requests per minute enforced over one-second
windows (10 per second: a fresh window never hands out a minute's burst) and answers of
`--latency` seconds (0.2; the seeds' table was made with ~1 s answers: `--latency 1`). By
default it runs on the real timeline; `--scale N` compresses time N-fold for a quicker run,
reporting rates and latencies uncompressed — but an event loop's own lateness (timers, a busy
loop, a shared machine: 1-5 ms) is not compressed, so at x4 it weighs 4x as much against a
window's 2% margin and a slot's 100 ms as it does for real (the first runs, at x4 on a host at a
load of ~7, measured 87% of the limit for gw.map; the same code reached 95-97% at x1). Reported per
mode: wall time, items per minute, the share of the provider's limit reached, 429s the provider
sent, errors, and p99 latency (from the start of the fan-out: every prompt is handed over at
once, as the caller of `asyncio.gather` does; for sequential, from each prompt's own start).

Rounds alternate the order of the modes (round r starts with the r-th), so a machine that gets
busier or quieter during the run weighs on every mode alike; each mode's row is its median
round by items per minute, and every round's figure is kept in the JSON.

    python benchmarks/fanout.py [--items 500] [--rounds 3] [--scale 1] [--latency 0.2]
    python benchmarks/fanout.py --smoke

writes benchmarks/results/fanout.json and .md (`fanout_latency<L>s`, `_x<N>` for another
latency or a compressed timeline).
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import time
from typing import Any

import openai
from harness import Output, add_output_options, stamp

from levergate import Gateway, Settings
from levergate.simulator import (
    LatencySettings,
    LimitSettings,
    SimHandle,
    SimSettings,
    run_simulator,
)

LIMIT_RPM = 600
LATENCY = 0.2  # seconds per answer, the setting
TOKENS = 8
MARGIN = 0.02  # the key's limit margin in the gateway (half of it absorbs timer lateness)
MODES = ("sequential", "unbounded", "gw.map")


def sim_settings(scale: float, latency: float) -> SimSettings:
    per_second = LIMIT_RPM // 60
    return SimSettings(
        port=0,
        seed=1,
        latency=LatencySettings(ttft_ms=latency * 1000 / scale),
        limits=LimitSettings(rpm=per_second, window_seconds=1.0 / scale),
    )


def prompt(index: int) -> str:
    return f"Prompt number {index}."


async def direct(sdk: openai.AsyncOpenAI, index: int, begin: float) -> float | None:
    """One prompt through the SDK: its latency from `begin`, or None when it failed."""
    try:
        await sdk.chat.completions.create(
            model="sim-small", messages=[{"role": "user", "content": prompt(index)}],
            max_tokens=TOKENS,
        )  # fmt: skip
    except openai.APIError:
        return None
    return time.perf_counter() - begin


async def sequential(sim: SimHandle, items: int) -> list[float | None]:
    async with openai.AsyncOpenAI(base_url=sim.base_url, api_key="sk-a", timeout=60) as sdk:
        return [await direct(sdk, i, time.perf_counter()) for i in range(items)]


async def unbounded(sim: SimHandle, items: int) -> list[float | None]:
    async with openai.AsyncOpenAI(base_url=sim.base_url, api_key="sk-b", timeout=60) as sdk:
        begin = time.perf_counter()
        return list(await asyncio.gather(*(direct(sdk, i, begin) for i in range(items))))


async def mapped(sim: SimHandle, items: int, scale: float, concurrency: int) -> list[float | None]:
    settings = Settings.load(
        upstreams=[{"name": "p", "base_url": sim.base_url, "api_key": "sk-c",
                    "key_limits": {"rpm": LIMIT_RPM // 60, "window_seconds": 1.0 / scale,
                                   "margin": MARGIN}}],
        models=[{"name": "*", "upstream": "p"}],
        cache={"enabled": False},
    )  # fmt: skip
    latencies: list[float | None] = [None] * items
    bodies = [
        {"model": "sim-small", "messages": [{"role": "user", "content": prompt(i)}],
         "max_tokens": TOKENS}
        for i in range(items)
    ]  # fmt: skip
    async with Gateway(settings) as gw:
        begin = time.perf_counter()  # from the first item handed over, not from the gateway's build
        async for index, result in gw.imap(bodies, max_concurrency=concurrency):
            if isinstance(result, dict):
                latencies[index] = time.perf_counter() - begin
    return latencies


def p99(values: list[float]) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


async def measure(mode: str, sim: SimHandle, args: argparse.Namespace) -> dict[str, Any]:
    sim.reset()
    begin = time.perf_counter()
    if mode == "sequential":
        latencies = await sequential(sim, args.items)
    elif mode == "unbounded":
        latencies = await unbounded(sim, args.items)
    else:
        latencies = await mapped(sim, args.items, args.scale, args.concurrency)
    wall = (time.perf_counter() - begin) * args.scale
    ok = [x * args.scale for x in latencies if x is not None]
    if mode != "sequential":  # from the first item handed over to the last answer
        wall = max(ok, default=wall)
    per_minute = len(ok) / wall * 60
    return {
        "mode": mode,
        "wall_seconds": round(wall, 2),
        "items_per_minute": round(per_minute, 1),
        "share_of_limit": round(per_minute / LIMIT_RPM, 3),
        "provider_429s": int(sim.stats()["rate_limited"]),
        "errors": args.items - len(ok),
        "p99_seconds": round(p99(ok), 2),
    }


def median_rows(rounds: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per mode, the round with the median items per minute, and every round's figure."""
    rows = []
    for mode in MODES:
        runs = sorted(
            (row for one in rounds for row in one if row["mode"] == mode),
            key=lambda row: row["items_per_minute"],
        )
        if runs:
            chosen = dict(runs[(len(runs) - 1) // 2])
            chosen["rounds_items_per_minute"] = [row["items_per_minute"] for row in runs]
            rows.append(chosen)
    return rows


def markdown(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    lines = [
        (
            f"# Fan-out: {args.items} prompts, provider limit {LIMIT_RPM} RPM (10/s windows), "
            f"~{args.latency * 1000:.0f} ms answers (time x{args.scale:g}, reported "
            f"uncompressed; median of {args.rounds} alternating rounds)"
        ),
        "",
        "| mode | wall s | items/min | share of limit | provider 429s | errors | p99 s | rounds |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    lines += [
        f"| {r['mode']} | {r['wall_seconds']} | {r['items_per_minute']} | "
        f"{r['share_of_limit']:.1%} | {r['provider_429s']} | {r['errors']} | "
        f"{r['p99_seconds']} | {', '.join(f'{x:g}' for x in r['rounds_items_per_minute'])} |"
        for r in rows
    ]
    by = {r["mode"]: r for r in rows}
    if set(MODES) <= set(by):
        lines += [
            "",
            (
                f"gw.map / sequential throughput: "
                f"{by['gw.map']['items_per_minute'] / by['sequential']['items_per_minute']:.2f}x;"
                f" gw.map / unbounded: "
                f"{by['gw.map']['items_per_minute'] / by['unbounded']['items_per_minute']:.2f}x."
                f" The gateway's limiter admits at most {1 / (1 + MARGIN):.1%} of the limit "
                f"(its margin is {MARGIN:.0%})."
            ),
        ]
    return "\n".join(lines) + "\n"


async def main_async(args: argparse.Namespace) -> None:
    modes = list(MODES) if args.modes is None else args.modes.split(",")
    rounds: list[list[dict[str, Any]]] = []
    async with run_simulator(sim_settings(args.scale, args.latency)) as sim:
        for r in range(args.rounds):
            order = modes[r % len(modes) :] + modes[: r % len(modes)]
            rounds.append([await measure(mode, sim, args) for mode in order])
    rows = median_rows(rounds)
    data = {**stamp(), "items": args.items, "scale": args.scale, "limit_rpm": LIMIT_RPM,
            "latency_s": args.latency, "margin": MARGIN, "rounds": rounds, "rows": rows,
            "python": platform.python_version()}  # fmt: skip
    name = "fanout" + ("" if args.latency == LATENCY else f"_latency{args.latency:g}s")
    name += "" if args.scale == 1 else f"_x{args.scale:g}"
    Output.of(args).write(name, data, markdown(rows, args))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=500)
    parser.add_argument("--scale", type=float, default=1.0, help="time compression")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--latency", type=float, default=LATENCY, help="seconds per answer")
    parser.add_argument("--concurrency", type=int, default=64, help="gw.map's max_concurrency")
    parser.add_argument("--modes", default=None, help=f"a subset of {','.join(MODES)}")
    add_output_options(parser)
    args = parser.parse_args()
    if args.smoke:
        args.items, args.scale, args.rounds = 40, 20.0, 1
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
