"""Continuous batching: aggregate decode throughput at 1, 4, 8 and 16 concurrent streams, and
the time to first token of a lone request on the batching engine against an engine that serves
one sequence at a time (slots=1).

`--in-place-ab` (issue 29 §1: "no loss elsewhere") runs the same levels on two batching engines,
one reusing prefixes in the KV pool itself (`prefix_cache.in_place: true`) and one from saved
states only, in alternating order, plus waves of streams asking different questions after one
shared system prompt (where reuse in place applies under concurrency); writes
local_throughput_in_place.json/.md.

Every stream has its own prompt and generates exactly `--tokens` tokens (the end tokens are
banned through logit_bias, so no answer stops early). Aggregate tokens/s = all generated tokens
divided by the wall time from the first request to the last token. Levels are run in an
interleaved order, twice in full mode; the lone-TTFT comparison alternates the two engines.
Writes benchmarks/results/local_throughput.json/.md.

    .venv/bin/python benchmarks/local_throughput.py [--quick | --smoke] [--in-place-ab]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from harness import Output, add_output_options
from local_common import (
    END_TOKENS,
    SMOKE_THREADS,
    chat,
    engine,
    environment,
    median,
    stop,
    timed,
    write,
)

from levergate.upstreams.local import LocalEndpoint

TOPICS = ["a lighthouse", "a lost key", "a dragon", "the sea", "a train", "a garden",
          "a robot", "winter", "a market", "a violin", "a storm", "a bakery",
          "a mountain", "a library", "a fox", "a comet"]  # fmt: skip
LONG_QUESTION = (
    "Summarise the following notes in one sentence.\n"
    + (
        "The delivery van leaves at eight, stops at the market, then at the school, and returns "
        "before noon; on Fridays it also visits the hospital. "
    )
    * 12
)


async def level(endpoint: LocalEndpoint, streams: int, tokens: int) -> dict[str, Any]:
    calls = [
        chat(
            f"Write a story about {TOPICS[i % len(TOPICS)]}.",
            max_tokens=tokens,
            temperature=0.7,
            seed=i,
            logit_bias=END_TOKENS,
        )
        for i in range(streams)
    ]
    started = time.perf_counter()
    results = await asyncio.gather(*[timed(endpoint, call) for call in calls])
    wall = time.perf_counter() - started
    generated = sum(r.tokens for r in results)
    return {
        "streams": streams,
        "tokens": generated,
        "seconds": wall,
        "tokens_per_s": generated / wall,
        "ttft_median_s": median([r.ttft for r in results]),
    }


async def lone_ttft(batching: LocalEndpoint, single: LocalEndpoint, rounds: int) -> dict[str, Any]:
    times: dict[str, list[float]] = {"batching": [], "single": []}
    for i in range(rounds):
        for name, endpoint in (("batching", batching), ("single", single)):
            # A new opening each time, so no prefix is reused and prefill is measured.
            call = chat(f"Note {i}. {LONG_QUESTION}", max_tokens=2)
            times[name].append((await timed(endpoint, call)).ttft)
    batching_ms, single_ms = median(times["batching"]) * 1000, median(times["single"]) * 1000
    return {
        "prompt_tokens": (await timed(single, chat(LONG_QUESTION, max_tokens=1))).prompt,
        "batching_ms": batching_ms,
        "single_ms": single_ms,
        "worse_pct": 100.0 * (batching_ms - single_ms) / single_ms,
    }


async def run(quick: bool, *, smoke: bool = False) -> dict[str, Any]:
    tokens = 4 if smoke else 32 if quick else 64
    order = [1, 8] if smoke else [1, 16, 4, 8] if quick else [1, 16, 4, 8, 8, 4, 16, 1]
    threads = SMOKE_THREADS if smoke else None
    batching = engine(threads=threads)
    single = engine(slots=1, threads=threads)
    try:
        await timed(batching, chat("Warm-up.", max_tokens=2))
        await timed(single, chat("Warm-up.", max_tokens=2))
        runs = [await level(batching, streams, tokens) for streams in order]
        by_level: dict[int, list[float]] = {}
        for r in runs:
            by_level.setdefault(r["streams"], []).append(r["tokens_per_s"])
        levels = {n: median(v) for n, v in sorted(by_level.items())}
        one_at_a_time = await level(single, 8, tokens)
        return {
            "tokens_per_stream": tokens,
            "runs": runs,
            "tokens_per_s": levels,
            "speedup_8_vs_1": levels[8] / levels[1],
            "one_at_a_time_8_streams_tokens_per_s": one_at_a_time["tokens_per_s"],
            "speedup_8_vs_one_at_a_time": levels[8] / one_at_a_time["tokens_per_s"],
            "lone_ttft": await lone_ttft(batching, single, 1 if smoke else 3 if quick else 6),
            "threads": batching.threads,
            "quantization": batching.quantization,
            "slots": batching.runtime.slots,
        }
    finally:
        stop(batching)
        stop(single)


async def wave(endpoint: LocalEndpoint, system: str, streams: int, tokens: int) -> dict[str, Any]:
    """`streams` different questions at once after one system prompt the engine has seen."""
    calls = [
        chat(f"Question {i}: what is {TOPICS[i % len(TOPICS)]} for?", system=system,
             max_tokens=tokens, temperature=0.7, seed=i, logit_bias=END_TOKENS)
        for i in range(streams)
    ]  # fmt: skip
    started = time.perf_counter()
    results = await asyncio.gather(*[timed(endpoint, call) for call in calls])
    wall = time.perf_counter() - started
    return {
        "tokens_per_s": sum(r.tokens for r in results) / wall,
        "ttft_median_s": median([r.ttft for r in results]),
        "cached_tokens": sum(r.cached for r in results),
    }


async def in_place_ab(quick: bool, *, smoke: bool = False) -> dict[str, Any]:
    """The levels and shared-prefix waves on an engine reusing prefixes in place and on one
    reusing saved states only, alternating which goes first."""
    tokens = 4 if smoke else 32 if quick else 64
    order = [1, 8] if smoke else [1, 16, 4, 8] if quick else [1, 16, 4, 8, 8, 4, 16, 1]
    waves = 1 if smoke else 3 if quick else 6
    threads = SMOKE_THREADS if smoke else None
    engines = {
        "in place": engine(threads=threads, prefix_cache={"in_place": True}),
        "saved states": engine(threads=threads, prefix_cache={"in_place": False}),
    }
    names = list(engines)
    levels: dict[str, dict[int, list[float]]] = {name: {} for name in names}
    shared: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    try:
        for endpoint in engines.values():
            await timed(endpoint, chat("Warm-up.", max_tokens=2))
        for i, streams in enumerate(order):
            for name in names if i % 2 == 0 else names[::-1]:
                result = await level(engines[name], streams, tokens)
                levels[name].setdefault(streams, []).append(result["tokens_per_s"])
        for i in range(waves):
            system = f"Notes, set {i}. {LONG_QUESTION}"
            for name in names if i % 2 == 0 else names[::-1]:
                endpoint = engines[name]
                await timed(endpoint, chat("Read the notes.", system=system, max_tokens=2))
                shared[name].append(await wave(endpoint, system, 8, tokens))
        by_level = {name: {n: median(v) for n, v in sorted(levels[name].items())} for name in names}
        return {
            "tokens_per_stream": tokens,
            "tokens_per_s": by_level,
            "shared_prefix_waves": shared,
            "shared_prefix": {
                name: {
                    "tokens_per_s": median([w["tokens_per_s"] for w in shared[name]]),
                    "ttft_median_s": median([w["ttft_median_s"] for w in shared[name]]),
                }
                for name in names
            },
            "threads": engines["in place"].threads,
            "quantization": engines["in place"].quantization,
            "slots": engines["in place"].runtime.slots,
        }
    finally:
        for endpoint in engines.values():
            stop(endpoint)


def in_place_markdown(data: dict[str, Any]) -> str:
    ours, theirs = data["tokens_per_s"]["in place"], data["tokens_per_s"]["saved states"]
    a, b = data["shared_prefix"]["in place"], data["shared_prefix"]["saved states"]
    lines = [
        "# Continuous batching with prefixes reused in place or from saved states", "",
        (f"SmolLM2-135M-Instruct {data['quantization'].upper()}, {data['threads']} threads, "
         f"{data['slots']} slots; each stream generates {data['tokens_per_stream']} tokens "
         "(sampled, end tokens banned); the two engines in alternating order, medians. "
         "Ratio = in place / saved states (above 1: in place is faster)."), "",
        "| workload | in place | saved states | ratio |", "|---|---:|---:|---:|",
        *[f"| {n} streams, tokens/s | {v:.1f} | {theirs[n]:.1f} | {v / theirs[n]:.2f}x |"
          for n, v in ours.items()],
        (f"| 8 questions after one shared system prompt, tokens/s | {a['tokens_per_s']:.1f} | "
         f"{b['tokens_per_s']:.1f} | {a['tokens_per_s'] / b['tokens_per_s']:.2f}x |"),
        (f"| the same, median TTFT (ms; below 1: in place is faster) | "
         f"{a['ttft_median_s'] * 1000:.0f} | {b['ttft_median_s'] * 1000:.0f} | "
         f"{a['ttft_median_s'] / b['ttft_median_s']:.2f}x |"),
    ]  # fmt: skip
    return "\n".join(lines) + "\n"


def markdown(data: dict[str, Any]) -> str:
    levels = data["tokens_per_s"]
    lone = data["lone_ttft"]
    lines = [
        "# Continuous batching: aggregate tokens/s by concurrent streams", "",
        (f"SmolLM2-135M-Instruct {data['quantization'].upper()}, {data['threads']} threads, "
         f"{data['slots']} slots; each stream generates {data['tokens_per_stream']} tokens "
         "(sampled, end tokens banned); median of the runs at each level."), "",
        "| concurrent streams | aggregate tokens/s | vs 1 stream |", "|---:|---:|---:|",
        *[f"| {n} | {v:.1f} | {v / levels[1]:.2f}x |" for n, v in levels.items()],
        "",
        (f"8 streams on an engine that serves one sequence at a time (slots=1): "
         f"{data['one_at_a_time_8_streams_tokens_per_s']:.1f} tokens/s, so batching gives "
         f"**{data['speedup_8_vs_one_at_a_time']:.2f}x** at 8 streams (goal: >= 1.5x)."),
        "",
        (f"Lone request, {lone['prompt_tokens']}-token prompt, median TTFT: batching engine "
         f"{lone['batching_ms']:.0f} ms, one-at-a-time engine {lone['single_ms']:.0f} ms "
         f"({lone['worse_pct']:+.1f}%; goal: no more than 10% worse)."),
    ]  # fmt: skip
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="32 tokens per stream, one pass")
    parser.add_argument("--in-place-ab", action="store_true",
                        help="prefixes reused in place against saved states")  # fmt: skip
    add_output_options(parser)
    args = parser.parse_args()
    out = Output.of(args)
    if args.in_place_ab:
        data = {**environment(), **asyncio.run(in_place_ab(args.quick, smoke=args.smoke))}
        markdown_ = in_place_markdown(data)
        write("local_throughput_in_place", data, markdown_, quick=args.quick, out=out)
        return
    data = {**environment(), **asyncio.run(run(args.quick, smoke=args.smoke))}
    write("local_throughput", data, markdown(data), quick=args.quick, out=out)


if __name__ == "__main__":
    main()
