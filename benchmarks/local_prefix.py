"""Prefix KV reuse: time to first token of a request whose ~1.5k-token system prompt was
computed before (warm) against one whose prompt is new (cold: full prefill), on the embedded
engine with `prefix_cache.in_place: true`, where the warm prompt starts from the cells the cold
request left in the pool (in place), and on the same engine with its default settings
(`in_place: false`), where it restores the prompt's saved KV state into its slot.

Each round uses a system prompt never seen before (a different opening line) and asks each
engine, in turn (A then B, then B then A), one question cold, then a different question with the
same system prompt warm, so both see the same machine load. Writes
benchmarks/results/local_prefix.json/.md.

    .venv/bin/python benchmarks/local_prefix.py [--quick | --smoke]
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from harness import Output, add_output_options
from local_common import SMOKE_THREADS, chat, engine, environment, median, stop, timed, write

from levergate.config import PrefixCacheSettings

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
    engines = {
        "in_place": engine(threads=threads, prefix_cache=PrefixCacheSettings(in_place=True)),
        "restored": engine(threads=threads, prefix_cache=PrefixCacheSettings(in_place=False)),
    }
    try:
        for endpoint in engines.values():
            await timed(endpoint, chat("Warm-up.", max_tokens=2))
        rows = []
        for session in range(rounds):
            system = system_prompt(session, prompt_tokens)
            order = list(engines) if session % 2 == 0 else list(engines)[::-1]
            row: dict[str, Any] = {"order": order}
            for name in order:
                endpoint = engines[name]
                cold = await timed(endpoint, chat("When do you open?", system=system, max_tokens=8))
                warm = await timed(endpoint, chat("Do you deliver?", system=system, max_tokens=8))
                if warm.cached == 0:
                    raise SystemExit(f"{name}: the warm prompt reused nothing")
                row |= {"prompt_tokens": warm.prompt, "warm_cached": warm.cached,
                        f"{name}_cold_ttft_s": cold.ttft, f"{name}_warm_ttft_s": warm.ttft,
                        f"{name}_warm_text": warm.text}  # fmt: skip
            rows.append(row)
        medians = {
            f"{name}_{kind}_median_s": median([r[f"{name}_{kind}_ttft_s"] for r in rows])
            for name in engines
            for kind in ("cold", "warm")
        }
        ours = engines["in_place"]
        return {
            "rounds": rows,
            "prompt_tokens": rows[-1]["prompt_tokens"],
            **medians,
            "speedup": medians["in_place_cold_median_s"] / medians["in_place_warm_median_s"],
            "in_place_vs_restored": (
                medians["in_place_warm_median_s"] / medians["restored_warm_median_s"]
            ),
            "same_answers": sum(r["in_place_warm_text"] == r["restored_warm_text"] for r in rows),
            "reused_in_place": ours.engine.scheduler.reused_in_place,
            "kv_bytes_in_ram": ours.engine.cache.ram_used,
            "kv_entries": len(ours.engine.cache),
            "quantization": ours.quantization,
            "threads": ours.threads,
        }
    finally:
        for endpoint in engines.values():
            stop(endpoint)


def markdown(data: dict[str, Any]) -> str:
    rows = data["rounds"]
    lines = [
        "# Prefix KV reuse: cold vs warm time to first token", "",
        (f"System prompt of ~{data['prompt_tokens']} tokens, SmolLM2-135M-Instruct "
         f"{data['quantization'].upper()}, {data['threads']} threads, default engine settings; "
         f"{len(rows)} rounds, engines alternating. Cold = the system prompt was never seen; "
         "warm = a different question after the same system prompt, its KV found in the pool "
         "(in place, the default) or restored from the saved state (`in_place: false`)."), "",
        "| | median TTFT | prompt tokens reused |", "|---|---:|---:|",
        f"| cold | {data['in_place_cold_median_s'] * 1000:.0f} ms | 0 |",
        (f"| warm, in place | {data['in_place_warm_median_s'] * 1000:.1f} ms | "
         f"{rows[0]['warm_cached']} |"),
        (f"| warm, state restored | {data['restored_warm_median_s'] * 1000:.1f} ms | "
         f"{rows[0]['warm_cached']} |"),
        "", (f"**Warm is {data['speedup']:.1f}x faster than cold** (goal: >= 20x); in place "
             f"takes {data['in_place_vs_restored']:.2f}x the restored warm TTFT. The greedy warm "
             f"answers agree in {data['same_answers']} of {len(rows)} rounds: the two engines' "
             "pools differ, and llama.cpp's logits move with them by rounding, which flips "
             "near-ties."), "",
        (f"Prefix cache after the run: {data['kv_entries']} entries, "
         f"{data['kv_bytes_in_ram'] / 1e6:.0f} MB of KV state (no logits)."),
        "", "Per round, warm (ms, in place / restored): " + ", ".join(
            f"{r['in_place_warm_ttft_s'] * 1000:.1f}/{r['restored_warm_ttft_s'] * 1000:.1f}"
            for r in rows
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
