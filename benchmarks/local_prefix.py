"""Prefix KV reuse: time to first token of a request whose ~1.5k-token system prompt was
computed before (warm: its KV state is restored from the prefix cache) against one whose
prompt is new (cold: full prefill), on the embedded engine with its default settings.

Each round uses a system prompt never seen before (a different opening line), asks one
question cold, then a different question with the same system prompt warm; rounds are
interleaved so both see the same machine load. Writes benchmarks/results/local_prefix.json/.md.

    .venv/bin/python benchmarks/local_prefix.py [--quick | --smoke]
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from harness import Output, add_output_options
from local_common import SMOKE_THREADS, chat, engine, environment, median, stop, timed, write

FACTS = [
    "The bakery opens at seven in the morning and closes at six in the evening.",
    "It is closed on Mondays and on public holidays.",
    "Sourdough loaves cost six dollars and rye loaves cost five dollars.",
    "Croissants are three dollars; cinnamon rolls are four dollars.",
    "Orders over fifty dollars are delivered free within ten kilometres.",
    "Cakes must be ordered two days in advance and need a twenty dollar deposit.",
    "The head baker is called Marta and has worked there for twelve years.",
    "Gluten-free bread is baked on Thursdays only, in a separate oven.",
    "Customers with a loyalty card get every tenth coffee for free.",
    "Leftover bread is donated to the food bank every evening at six thirty.",
]


def system_prompt(session: int, target_tokens: int) -> str:
    lines = [f"Session {session}: you are the assistant of The Rolling Pin bakery."]
    words = 0
    index = session
    while words * 1.3 < target_tokens:
        fact = FACTS[index % len(FACTS)]
        lines.append(f"Note {len(lines)}: {fact}")
        words += len(fact.split()) + 2
        index += 3
    return "\n".join(lines)


async def run(rounds: int, prompt_tokens: int, *, threads: int | None = None) -> dict[str, Any]:
    endpoint = engine(threads=threads)
    try:
        await timed(endpoint, chat("Warm-up.", max_tokens=2))
        rows = []
        for session in range(rounds):
            system = system_prompt(session, prompt_tokens)
            cold = await timed(endpoint, chat("When do you open?", system=system, max_tokens=8))
            warm = await timed(endpoint, chat("Do you deliver?", system=system, max_tokens=8))
            rows.append({
                "prompt_tokens": warm.prompt,
                "cold_ttft_s": cold.ttft, "warm_ttft_s": warm.ttft,
                "cold_cached": cold.cached, "warm_cached": warm.cached,
            })  # fmt: skip
        cold_median = median([r["cold_ttft_s"] for r in rows])
        warm_median = median([r["warm_ttft_s"] for r in rows])
        return {
            "rounds": rows,
            "prompt_tokens": rows[-1]["prompt_tokens"],
            "cold_ttft_median_s": cold_median,
            "warm_ttft_median_s": warm_median,
            "speedup": cold_median / warm_median if warm_median else 0.0,
            "kv_bytes_in_ram": endpoint.engine.cache.ram_used,
            "kv_entries": len(endpoint.engine.cache),
            "quantization": endpoint.quantization,
            "threads": endpoint.threads,
        }
    finally:
        stop(endpoint)


def markdown(data: dict[str, Any]) -> str:
    lines = [
        "# Prefix KV reuse: cold vs warm time to first token", "",
        (f"System prompt of ~{data['prompt_tokens']} tokens, SmolLM2-135M-Instruct "
         f"{data['quantization'].upper()}, {data['threads']} threads, default engine settings. "
         "Cold = the system prompt was never seen; warm = a different question after the same "
         "system prompt (its KV state restored from the prefix cache)."), "",
        "| | median TTFT | prompt tokens reused |", "|---|---:|---:|",
        (f"| cold | {data['cold_ttft_median_s'] * 1000:.0f} ms | "
         f"{data['rounds'][0]['cold_cached']} |"),
        (f"| warm | {data['warm_ttft_median_s'] * 1000:.1f} ms | "
         f"{data['rounds'][0]['warm_cached']} |"),
        "", f"**Warm is {data['speedup']:.1f}x faster** (goal: >= 20x).", "",
        (f"Prefix cache after the run: {data['kv_entries']} entries, "
         f"{data['kv_bytes_in_ram'] / 1e6:.0f} MB of KV state (no logits)."),
        "", "Per round (ms): " + ", ".join(
            f"{r['cold_ttft_s'] * 1000:.0f}/{r['warm_ttft_s'] * 1000:.1f}" for r in data["rounds"]
        ),
    ]  # fmt: skip
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds instead of 8")
    parser.add_argument("--prompt-tokens", type=int, default=1500)
    add_output_options(parser)
    args = parser.parse_args()
    out = Output.of(args)
    rounds = 3 if args.quick else 8
    if args.smoke:
        rounds, args.prompt_tokens = 1, 150
    threads = SMOKE_THREADS if args.smoke else None
    data = {**environment(), **asyncio.run(run(rounds, args.prompt_tokens, threads=threads))}
    write("local_prefix", data, markdown(data), quick=args.quick, out=out)


if __name__ == "__main__":
    main()
