"""The semantic cache's threshold gate (`levergate cache threshold`) on labelled paraphrase pairs:
does the threshold it chooses from sampled verifications keep the target false-hit rate on
traffic it was not chosen on, and how many more hits does it buy?

The data: QQP dev's question pairs (../shared/data, read at run time, never copied in). Each pair
stands for one lookup: the first question is in the cache, the second asks; the lookup's
would-be hit is the first question when no guard objects (`policies.guards`, every guard, as
shipped), at the cosine of the two questions' embeddings (the shipped local MiniLM). Its
verification is the pair's human label: a duplicate is a correct hit, anything else a false
hit. So the verifier here is a perfect judge; the benchmark measures the gate's choice, not a
judge's accuracy. False-hit rate is the gate's: wrong hits / hits (not cache_semantic_eval's
share of non-paraphrases that hit).

The loop, per split (5 random splits): 30% of the pairs are held out; the rest is traffic in
three rounds. The gateway starts at the shipped threshold (0.95) with `calibration.band` 0.1 and
verifies a sampled 10% of lookups (`calibration.rate`): a lookup's row carries its would-be
hit's similarity when it is at or above the floor (threshold - band), else none, exactly as
layers/cache/checks.py logs it. After each round the gate (policies/cache_threshold.py `choose`,
the CLI's code) reads every row logged so far and installs its choice (or keeps the threshold
when nothing qualifies), so the next round's band starts lower: the gate can only walk down as
far as it has measured. The headline: the final threshold on the held-out pairs, by target and
by rule (`upper bound`, the CLI's default: the 95% upper bound; `estimate`, `--by estimate`: the
measured rate itself), against the
shipped threshold on the same held-out pairs.

    python benchmarks/cache_threshold_gate.py [--smoke]

writes benchmarks/results/cache_threshold_gate.json and .md.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from typing import Any

import numpy as np
from cache_semantic_eval import embedder, load, score
from harness import Output, add_output_options, stamp

from levergate.cli.cache import MIN_VERIFICATIONS
from levergate.config import SemanticCacheSettings
from levergate.policies.cache_threshold import Verification, choose, wilson

TARGETS = (0.02, 0.05, 0.10, 0.15)
SPLITS = 5
ROUNDS = 3
HELD_OUT = 0.3
RATE = 0.1
BAND = 0.1


def rows_of(
    index: list[int], s: dict[str, Any], *, threshold: float, rng: random.Random
) -> list[Verification]:
    """The rows a gateway at `threshold` logs for these lookups, sampled at `RATE`."""
    floor = max(0.0, threshold - BAND)
    found = []
    for i in index:
        if rng.random() >= RATE:
            continue
        similarity = float(s["cosine"][i])
        if s["objections"][i] or similarity < floor:
            found.append(Verification(None, floor, "none"))
            continue
        found.append(Verification(similarity, floor, "agree" if s["labels"][i] else "disagree"))
    return found


def served(index: list[int], s: dict[str, Any], threshold: float) -> dict[str, Any]:
    """What a cache at `threshold` serves on these lookups: hit rate, false-hit rate."""
    cosine, labels = s["cosine"][index], s["labels"][index]
    clean = np.array([not s["objections"][i] for i in index], dtype=bool)
    hit = (cosine >= threshold) & clean
    hits, wrong = int(hit.sum()), int((hit & ~labels).sum())
    return {"threshold": threshold, "lookups": len(index), "hits": hits, "wrong": wrong,
            "hit_rate": hits / len(index), "false_hit_rate": wrong / hits if hits else 0.0,
            "interval": list(wilson(wrong, hits)) if hits else None}  # fmt: skip


def loop(s: dict[str, Any], seed: int, *, target: float, upper: bool, least: int) -> dict[str, Any]:
    n = len(s["labels"])
    order = list(range(n))
    random.Random(seed).shuffle(order)
    held = order[: int(n * HELD_OUT)]
    traffic = order[int(n * HELD_OUT) :]
    start = SemanticCacheSettings().threshold
    threshold, logged, rounds = start, [], []
    rng = random.Random(seed + 1)
    for r in range(ROUNDS):
        chunk = traffic[r * len(traffic) // ROUNDS : (r + 1) * len(traffic) // ROUNDS]
        logged += rows_of(chunk, s, threshold=threshold, rng=rng)
        chosen = choose(logged, target=target, min_verified=least, upper=upper)
        if chosen is not None:
            threshold = chosen.threshold
        rounds.append({"threshold": threshold, "rows": len(logged), "refused": chosen is None,
                       "measured": None if chosen is None else chosen.false_hit_rate,
                       "verified": None if chosen is None else chosen.verified})  # fmt: skip
    return {"seed": seed, "rounds": rounds, "held_out": served(held, s, threshold),
            "shipped": served(held, s, start)}  # fmt: skip


def summary(runs: list[dict[str, Any]], target: float) -> dict[str, Any]:
    held = [r["held_out"] for r in runs]
    shipped = [r["shipped"] for r in runs]
    return {
        "target": target,
        "threshold": [r["held_out"]["threshold"] for r in runs],
        "hit_rate": statistics.median(h["hit_rate"] for h in held),
        "shipped_hit_rate": statistics.median(h["hit_rate"] for h in shipped),
        "false_hit_rate": [h["false_hit_rate"] for h in held],
        "shipped_false_hit_rate": statistics.median(h["false_hit_rate"] for h in shipped),
        "within_target": sum(h["false_hit_rate"] <= target for h in held),
        "refused": sum(r["refused"] for run in runs for r in run["rounds"]),
        "rounds": sum(len(run["rounds"]) for run in runs),
        "splits": len(runs),
    }


def table(results: dict[str, Any]) -> str:
    pct = "{:.1%}".format
    lines = [
        (
            "| rule | target | final threshold (per split) | held-out hit rate (shipped 0.95) | "
            "held-out false-hit rate (per split) | within target | rounds refused |"
        ),
        "|---|---|---|---|---|---|---|",
    ]
    for rule, rows in results["by_rule"].items():
        for row in rows:
            thresholds = ", ".join(f"{t:.3f}" for t in row["threshold"])
            rates = ", ".join(pct(x) for x in row["false_hit_rate"])
            lines.append(
                f"| {rule} | {pct(row['target'])} | {thresholds} | {pct(row['hit_rate'])} "
                f"({pct(row['shipped_hit_rate'])}) | {rates} (shipped "
                f"{pct(row['shipped_false_hit_rate'])}) | {row['within_target']}/{row['splits']} "
                f"| {row['refused']}/{row['rounds']} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_output_options(parser)
    args = parser.parse_args()
    out = Output.of(args)
    limit = 200 if args.smoke else None
    least = 10 if args.smoke else MIN_VERIFICATIONS
    splits = 2 if args.smoke else SPLITS
    began = time.perf_counter()
    pairs = load("qqp_dev", limit, random.Random(0))
    s = score(pairs, embedder())
    embedded = time.perf_counter() - began
    by_rule: dict[str, list[dict[str, Any]]] = {}
    runs: dict[str, Any] = {}
    for rule, upper in (("upper bound", True), ("estimate", False)):
        for target in TARGETS:
            found = [loop(s, seed, target=target, upper=upper, least=least)
                     for seed in range(splits)]  # fmt: skip
            by_rule.setdefault(rule, []).append(summary(found, target))
            runs[f"{rule}@{target}"] = found
    results = {"by_rule": by_rule}
    markdown = (
        f"# The semantic cache's threshold gate on QQP dev (held-out pairs)\n\n"
        f"{len(pairs):,} pairs ({int(s['labels'].sum()):,} duplicates), {splits} random splits: "
        f"{HELD_OUT:.0%} held out, the rest as traffic in {ROUNDS} rounds; the gateway starts "
        f"at {SemanticCacheSettings().threshold}, band {BAND}, verifying {RATE:.0%} of lookups "
        f"(a perfect verifier: the human label); at least {least} verified hits per choice.\n\n"
        f"{table(results)}\n\n"
        "False-hit rate: wrong hits / hits. `upper bound` holds the rate's 95% Wilson upper "
        "bound to the target (the CLI's default), `estimate` the measured rate (`--by "
        "estimate`). A refused round keeps the threshold.\n\n"
        f"Embedding took {embedded:.0f} s; load average {os.getloadavg()[0]:.1f}.\n"
    )  # fmt: skip
    data = {"stamp": stamp(), "pairs": len(pairs), "targets": TARGETS, "splits": splits,
            "rounds": ROUNDS, "held_out": HELD_OUT, "rate": RATE, "band": BAND,
            "min_verifications": least, "results": results, "runs": runs,
            "argv": sys.argv[1:]}  # fmt: skip
    out.write("cache_threshold_gate", data, markdown)


if __name__ == "__main__":
    main()
