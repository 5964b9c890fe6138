"""Local embeddings: texts/s for many concurrent one-text requests (the semantic cache's
pattern), with micro-batching (up to 32 texts, 2 ms wait) and without (batches of one), in one
run, alternating. Writes benchmarks/results/local_embeddings.json/.md.

    .venv/bin/python benchmarks/local_embeddings.py [--quick | --smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from harness import Output, add_output_options
from local_common import SMOKE_THREADS, environment, median, write

from levergate.config import LocalEmbeddingsSettings
from levergate.upstreams.embeddings_local import LocalEmbedder

SENTENCES = [
    "How do I reset my password?", "What time does the bakery open on Sundays?",
    "Can I return an item without a receipt?", "Is there parking near the station?",
    "How long does delivery take to the city centre?", "Do you have gluten-free bread?",
    "What is the refund policy for cancelled orders?", "Where can I find my invoice?",
]  # fmt: skip


async def burst(embedder: LocalEmbedder, requests: int) -> float:
    texts = [f"{SENTENCES[i % len(SENTENCES)]} (ticket {i})" for i in range(requests)]
    started = time.perf_counter()
    await asyncio.gather(*[embedder.embed([t]) for t in texts])
    return requests / (time.perf_counter() - started)


async def run(requests: int, rounds: int, *, threads: int | None = None) -> dict[str, Any]:
    batched = LocalEmbedder(
        LocalEmbeddingsSettings(batch_max=32, batch_wait_ms=2.0, threads=threads)
    )
    single = LocalEmbedder(LocalEmbeddingsSettings(batch_max=1, batch_wait_ms=0.0, threads=threads))
    try:
        await burst(batched, 8)
        await burst(single, 8)
        rates: dict[str, list[float]] = {"batched": [], "single": []}
        for _ in range(rounds):
            rates["single"].append(await burst(single, requests))
            rates["batched"].append(await burst(batched, requests))
        started = time.perf_counter()
        for i in range(min(64, requests)):
            await single.embed([SENTENCES[i % len(SENTENCES)]])
        sequential = min(64, requests) / (time.perf_counter() - started)
    finally:
        await batched.aclose()
        await single.aclose()
    with_batching, without = median(rates["batched"]), median(rates["single"])
    return {
        "requests": requests,
        "rounds": rates,
        "batched_texts_per_s": with_batching,
        "unbatched_texts_per_s": without,
        "sequential_texts_per_s": sequential,
        "speedup": with_batching / without,
    }


def markdown(data: dict[str, Any]) -> str:
    lines = [
        "# Local embeddings (all-MiniLM-L6-v2 int8 ONNX): micro-batching", "",
        (f"{data['requests']} concurrent requests of one short text each (the semantic cache's "
         "pattern); median texts/s over the rounds."), "",
        "| mode | texts/s |", "|---|---:|",
        f"| one request at a time, awaited in turn | {data['sequential_texts_per_s']:.0f} |",
        f"| concurrent, no batching (batch size 1) | {data['unbatched_texts_per_s']:.0f} |",
        (f"| concurrent, micro-batched (<= 32 texts, 2 ms wait) | "
         f"{data['batched_texts_per_s']:.0f} |"),
        "", f"**Micro-batching: {data['speedup']:.1f}x** the throughput of batches of one.",
    ]  # fmt: skip
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="128 requests, 2 rounds")
    add_output_options(parser)
    args = parser.parse_args()
    out = Output.of(args)
    requests, rounds = (16, 1) if args.smoke else (128, 2) if args.quick else (512, 4)
    threads = SMOKE_THREADS if args.smoke else None
    data = {**environment(), **asyncio.run(run(requests, rounds, threads=threads))}
    write("local_embeddings", data, markdown(data), quick=args.quick, out=out)


if __name__ == "__main__":
    main()
