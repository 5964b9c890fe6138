"""Prompt-lookup speculative decoding: decode speed with and without it, on prompts that copy
from their input (where it should help) and on free writing (where drafts mostly miss).

Greedy decoding, so both runs must give the same text (checked and reported). Each prompt runs
plain then speculative, alternately, `--rounds` times; the speed-up is the ratio of median decode
rates (tokens after the first per second). Writes benchmarks/results/local_speculative.json/.md.

    .venv/bin/python benchmarks/local_speculative.py [--quick | --smoke]
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from harness import Output, add_output_options
from local_common import SMOKE_THREADS, chat, engine, environment, median, stop, timed, write

NOTES = (
    "Order 4471 for Ms. Jane Alvarez: two sourdough loaves, one rye loaf, a dozen chocolate chip "
    "cookies and a lemon tart. Deliver to 18 Harbour Road, flat 3, on Saturday between nine and "
    "ten in the morning. Payment by card on delivery. Ring the bell twice; the intercom is broken."
)
PROMPTS = {
    "copy": f"Repeat this text exactly, word for word:\n{NOTES}",
    "extract": f"List every item of this order, one per line, with its quantity:\n{NOTES}",
    "rewrite": f"Rewrite this order as a polite confirmation email:\n{NOTES}",
    "free": "Write a short poem about autumn leaves.",
}


def call(prompt: str, *, speculative: bool, tokens: int) -> Any:
    made = chat(prompt, max_tokens=tokens)
    return made.with_controls(speculative=speculative)


async def run(
    rounds: int, tokens: int, prompts: dict[str, str], *, threads: int | None = None
) -> dict[str, Any]:
    endpoint = engine(threads=threads)
    try:
        await timed(endpoint, chat("Warm-up.", max_tokens=2))
        rows = []
        for name, prompt in prompts.items():
            rates: dict[str, list[float]] = {"plain": [], "speculative": []}
            texts: dict[str, str] = {}
            stats = endpoint.engine.stats
            drafted, accepted = stats.drafted_tokens, stats.accepted_tokens
            for _ in range(rounds):
                for mode in ("plain", "speculative"):
                    result = await timed(
                        endpoint, call(prompt, speculative=mode == "speculative", tokens=tokens)
                    )
                    rates[mode].append(result.decode_rate)
                    texts[mode] = result.text
            plain, fast = median(rates["plain"]), median(rates["speculative"])
            rows.append({
                "prompt": name,
                "plain_tokens_per_s": plain,
                "speculative_tokens_per_s": fast,
                "speedup": fast / plain if plain else 0.0,
                "same_output": texts["plain"] == texts["speculative"],
                "drafted": stats.drafted_tokens - drafted,
                "accepted": stats.accepted_tokens - accepted,
            })  # fmt: skip
        return {"rows": rows, "max_tokens": tokens, "threads": endpoint.threads,
                "quantization": endpoint.quantization}  # fmt: skip
    finally:
        stop(endpoint)


def markdown(data: dict[str, Any]) -> str:
    lines = [
        "# Prompt-lookup speculative decoding", "",
        (f"SmolLM2-135M-Instruct {data['quantization'].upper()}, {data['threads']} threads, "
         f"greedy, up to {data['max_tokens']} tokens, drafts of up to 8 tokens from 1-3-gram "
         "matches; decode rate = tokens after the first per second, median of the rounds."), "",
        ("| prompt | plain tok/s | speculative tok/s | speed-up | draft tokens accepted "
         "| same output |"),
        "|---|---:|---:|---:|---:|:---:|",
        *[
            (f"| {r['prompt']} | {r['plain_tokens_per_s']:.1f} | "
             f"{r['speculative_tokens_per_s']:.1f} | {r['speedup']:.2f}x | "
             f"{r['accepted']}/{r['drafted']} | {'yes' if r['same_output'] else 'NO'} |")
            for r in data["rows"]
        ],
    ]  # fmt: skip
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 rounds, 64 tokens")
    add_output_options(parser)
    args = parser.parse_args()
    out = Output.of(args)
    rounds, tokens = (1, 8) if args.smoke else (2, 64) if args.quick else (5, 128)
    prompts = {k: PROMPTS[k] for k in ("copy", "free")} if args.smoke else PROMPTS
    threads = SMOKE_THREADS if args.smoke else None
    data = {**environment(), **asyncio.run(run(rounds, tokens, prompts, threads=threads))}
    write("local_speculative", data, markdown(data), quick=args.quick, out=out)


if __name__ == "__main__":
    main()
