"""Replay of a realistic workload through the caches: ShareGPT first-turn prompts (read at run
time from ../shared/data/sharegpt_prompts; research use, never copied here) with injected
repeats, against the simulator with realistic latency.

Each request is, with the stated probabilities: an exact repeat of an earlier prompt (25%), a
templated paraphrase of an earlier prompt (15%: a polite prefix or suffix, different casing and
punctuation), or a new prompt (60%). All are deterministic (temperature 0), the semantic cache is
on at the shipped threshold, and the gateway runs in-process with the local MiniLM embedder.

Reported: hit rates by kind (exact, coalesced, semantic, miss), semantic hits that served the
answer of a *different* prompt (false hits: every request knows its origin prompt, and the
simulator's answer is a deterministic function of the prompt), tokens and dollars avoided at an
assumed price, and latency p50/p90 of hits versus misses.

    python benchmarks/cache_workload.py [--quick | --smoke]

writes benchmarks/results/cache_workload.json and .md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import time
from collections import Counter
from typing import Any

from harness import Output, add_output_options, data_file, stamp

EXACT, PARAPHRASE = 0.25, 0.15
PRICE_IN, PRICE_OUT = 0.15, 0.60  # $ per million tokens, a small hosted model
PREFIXES = ("Please answer this: ", "Quick question. ", "Hi! ")
SUFFIXES = (" Thanks!", " Please be concise.", "")


def prompts(limit: int, rng: random.Random) -> list[str]:
    path = data_file("sharegpt_prompts/sharegpt_first_prompts.jsonl")
    rows = [json.loads(line) for line in path.open()]
    texts = [r["prompt"].strip() for r in rows if 20 <= len(r["prompt"].strip()) <= 400]
    rng.shuffle(texts)
    return texts[:limit]


def paraphrase(text: str, rng: random.Random) -> str:
    body = text.rstrip(".?! ")
    body = body[0].lower() + body[1:] if rng.random() < 0.5 else body
    return rng.choice(PREFIXES) + body + rng.choice(("?", ".", "")) + rng.choice(SUFFIXES)


def workload(count: int, rng: random.Random) -> list[tuple[int, str, str]]:
    """(origin id, text, kind) per request."""
    fresh = prompts(count, rng)
    seen: list[int] = []
    out: list[tuple[int, str, str]] = []
    for _ in range(count):
        roll = rng.random()
        if seen and roll < EXACT:
            origin = rng.choice(seen)
            out.append((origin, fresh[origin], "exact"))
        elif seen and roll < EXACT + PARAPHRASE:
            origin = rng.choice(seen)
            out.append((origin, paraphrase(fresh[origin], rng), "paraphrase"))
        else:
            origin = len(seen)
            seen.append(origin)
            out.append((origin, fresh[origin], "new"))
    return out


async def replay(requests: list[tuple[int, str, str]], *, concurrency: int) -> dict[str, Any]:
    from levergate.config import Settings
    from levergate.core.reply import Completed
    from levergate.gateway import Gateway
    from levergate.simulator import SimSettings, run_simulator

    latency = {"ttft_ms": 150, "tokens_per_second": 200}
    async with run_simulator(SimSettings(latency=latency)) as sim:
        settings = Settings.for_upstream(sim.base_url, cache={"default": {"semantic": True}})
        # No embedder given: the pipeline builds the shipped one (local MiniLM, micro-batched).
        async with Gateway(settings) as gateway:
            answers: dict[int, str] = {}
            records: list[dict[str, Any]] = []
            slots = asyncio.Semaphore(concurrency)

            async def one(origin: int, text: str, kind: str) -> None:
                async with slots:
                    body = {"model": "sim-small", "temperature": 0, "max_tokens": 48,
                            "messages": [{"role": "user", "content": text}]}  # fmt: skip
                    start = time.perf_counter()
                    reply = await gateway.serve(gateway.make_call("chat", body))
                    elapsed = time.perf_counter() - start
                if not isinstance(reply, Completed):
                    raise TypeError("expected a whole answer")
                content = reply.data["choices"][0]["message"]["content"]
                outcome = reply.headers.get("x-levergate-cache", "none")
                if kind == "new" and outcome == "miss":
                    answers.setdefault(origin, content)
                records.append({"origin": origin, "kind": kind, "outcome": outcome,
                                "seconds": elapsed, "content": content,
                                "usage": reply.data.get("usage") or {}})  # fmt: skip

            for start in range(0, len(requests), concurrency * 4):
                batch = requests[start : start + concurrency * 4]
                await asyncio.gather(*(one(*request) for request in batch))
            stats = gateway.pipeline.shared.cache.stats if gateway.pipeline.shared.cache else None
            sim_calls = sim.stats()["requests_by_endpoint"].get("/v1/chat/completions", 0)
    return {"records": records, "answers": answers, "sim_calls": sim_calls, "stats": stats}


def summarise(run: dict[str, Any], requests: int) -> dict[str, Any]:
    records, answers = run["records"], run["answers"]
    outcomes = Counter(r["outcome"] for r in records)
    by_kind = {k: Counter(r["outcome"] for r in records if r["kind"] == k)
               for k in ("new", "exact", "paraphrase")}  # fmt: skip
    # What each origin prompt was ever answered upstream (its own text or a paraphrase of it):
    # a semantic hit that serves anything else served another prompt's answer.
    by_origin: dict[int, set[str]] = {}
    for r in records:
        if r["outcome"] == "miss":
            by_origin.setdefault(r["origin"], set()).add(r["content"])
    false_hits = sum(
        1 for r in records
        if r["outcome"] == "semantic" and r["content"] not in by_origin.get(r["origin"], set())
    )  # fmt: skip
    del answers
    saved_in = sum(r["usage"].get("prompt_tokens", 0) for r in records if r["outcome"] != "miss")
    saved_out = sum(
        r["usage"].get("completion_tokens", 0) for r in records if r["outcome"] != "miss"
    )
    spent_in = sum(r["usage"].get("prompt_tokens", 0) for r in records if r["outcome"] == "miss")
    spent_out = sum(
        r["usage"].get("completion_tokens", 0) for r in records if r["outcome"] == "miss"
    )

    def pct(values: list[float], q: int) -> float:
        return 1000 * statistics.quantiles(values, n=10)[q - 1] if len(values) > 1 else 0.0

    hits = [r["seconds"] for r in records if r["outcome"] in {"hit", "semantic", "coalesced"}]
    misses = [r["seconds"] for r in records if r["outcome"] == "miss"]
    return {
        "requests": requests,
        "injected": {
            "exact_repeat": EXACT,
            "paraphrase": PARAPHRASE,
            "new": 1 - EXACT - PARAPHRASE,
        },
        "outcomes": dict(outcomes),
        "outcomes_by_injected_kind": {k: dict(v) for k, v in by_kind.items()},
        "upstream_calls": run["sim_calls"],
        "semantic_false_hits": false_hits,
        "tokens_avoided": {"input": saved_in, "output": saved_out},
        "tokens_spent": {"input": spent_in, "output": spent_out},
        "cost_avoided_share": (saved_in * PRICE_IN + saved_out * PRICE_OUT)
        / max(1e-9, (saved_in + spent_in) * PRICE_IN + (saved_out + spent_out) * PRICE_OUT),
        "latency_p50_ms_by_outcome": {
            o: 1000 * statistics.median(r["seconds"] for r in records if r["outcome"] == o)
            for o in outcomes
        },
        "latency_ms": {
            "hit_p50": pct(hits, 5),
            "hit_p90": pct(hits, 9),
            "miss_p50": pct(misses, 5),
            "miss_p90": pct(misses, 9),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    add_output_options(parser)
    args = parser.parse_args()
    out = Output.of(args)
    count = 40 if args.smoke else 200 if args.quick else 1000
    requests = workload(count, random.Random(11))
    run = asyncio.run(replay(requests, concurrency=8))
    result = {"benchmark": "cache_workload", **stamp(), "quick": args.quick,
              **summarise(run, count)}  # fmt: skip
    o, lat = result["outcomes"], result["latency_ms"]
    header = "# Cache replay: ShareGPT prompts with injected repeats"
    lines = [
        header + (" (quick)" if args.quick else ""),
        "",
        (
            f"{count} requests: {EXACT:.0%} exact repeats, {PARAPHRASE:.0%} templated "
            "paraphrases, the rest new; temperature 0; simulator TTFT 150 ms, 200 tokens/s, "
            "48 output tokens."
        ),
        "",
        "| outcome | requests |",
        "|---|---|",
        *(f"| {k} | {v} |" for k, v in sorted(o.items())),
        "",
        f"By injected kind: {result['outcomes_by_injected_kind']}",
        "",
        (
            f"Upstream calls: {result['upstream_calls']} for {count} requests; semantic false "
            f"hits: {result['semantic_false_hits']}; cost avoided: "
            f"{result['cost_avoided_share']:.1%} (at ${PRICE_IN}/${PRICE_OUT} per M "
            "input/output tokens)."
        ),
        "",
        (
            f"Latency: hits p50 {lat['hit_p50']:.1f} ms / p90 {lat['hit_p90']:.1f} ms; "
            f"misses p50 {lat['miss_p50']:.1f} ms / p90 {lat['miss_p90']:.1f} ms. p50 by "
            "outcome: "
            + ", ".join(f"{k} {v:.1f} ms" for k, v in result["latency_p50_ms_by_outcome"].items())
            + "."
        ),
        "",
    ]
    out.write("cache_workload", result, "\n".join(lines))


if __name__ == "__main__":
    main()
