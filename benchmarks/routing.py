"""The learned router on RouteLLM's MMLU data: cost saved at 95% of GPT-4's quality, on
questions the router never saw, against random routing, a length heuristic and the oracle; and
the time routing adds to a request (embedding included).

Data: ../shared/data/routellm/mmlu_mixtral_vs_gpt4_dev.csv (7,096 MMLU questions, whether
Mixtral-8x7B and GPT-4-1106 each answered correctly), read at run time, never copied here.

Protocol. 5-fold cross-validation over that file only. Folds are grouped by prompt text, so
the 41 questions that appear twice never straddle train and test. Each outer training part
trains the router exactly as `levergate router train` does — inner 5-fold out-of-fold scores
choose the threshold for 95% retention — and the outer test part is scored by a router that
never saw it. Two figures per router:
  * curve saving: the test rows' pooled cost-quality curve read at 95% retention (RouteLLM's
    own way to state "saving at 95%", thresholds read on the evaluation curve);
  * held-out threshold: the threshold chosen on the training folds applied to the test fold,
    reporting the retention it actually reached and what it saved (the stricter figure).
A second split holds out whole subjects (grouped by MMLU subject): how much of the router's
edge is knowing which subjects Mixtral is weak at.

Cost: the RouteLLM convention (saving = share of calls not sent to the strong model), so the
figures compare with RouteLLM's published 45% (random: about 32%). In dollars at published
list prices the saving is nearly the same share, because Mixtral-8x7B ($0.60 / 1M tokens in and
out, Together AI) costs 6% of GPT-4-1106's input price ($10 / 1M in, $30 / 1M out).

    python benchmarks/routing.py [--quick] [--data ../shared/data]
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from benchmarks.harness import RESULTS, stamp, write_results

from levergate.config import LocalEmbeddings, Routing
from levergate.routing.curve import curve, measured, random_saving
from levergate.routing.labels import Labels, read_labels
from levergate.routing.train import Options, embedder, features, fit, spec_for

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
FILE = "routellm/mmlu_mixtral_vs_gpt4_dev.csv"
TARGET = 0.95
ROUNDS = 5
LONG_CHARS = 100_000
PUBLISHED = {"routellm_mmlu_saving_at_95": 0.45, "routellm_random_saving_at_95": 0.32}
PRICES = {"mixtral-8x7b": {"input": 0.6, "output": 0.6}, "gpt-4-1106": {"input": 10, "output": 30}}


def cross_validate(
    x: np.ndarray[Any, Any], labels: Labels, groups: list[str], options: Options, folds: int
) -> dict[str, Any]:
    from sklearn.model_selection import GroupKFold

    from levergate.routing.model import Scorer

    n = len(labels)
    scores, kept_rows, strong_rows = np.zeros(n), np.zeros(n), np.zeros(n, dtype=bool)
    per_fold = []
    splitter = GroupKFold(n_splits=folds, shuffle=True, random_state=options.seed)
    for train_rows, test_rows in splitter.split(x, groups=groups):
        fitted = fit(x[train_rows], labels.cheap[train_rows], labels.strong[train_rows],
                     options=options, groups=[labels.prompts[i] for i in train_rows])  # fmt: skip
        s = Scorer(fitted.network, inputs=x.shape[1]).score(x[test_rows])
        scores[test_rows] = s
        picks = s >= fitted.threshold
        strong_rows[test_rows] = picks
        kept_rows[test_rows] = np.where(picks, labels.strong[test_rows], labels.cheap[test_rows])
        kept, share = measured(s, labels.cheap[test_rows], labels.strong[test_rows],
                               fitted.threshold)  # fmt: skip
        per_fold.append({"retention": kept, "saving": 1 - share})
    c = curve(scores, labels.cheap, labels.strong)
    return {
        "curve_saving": c.saving_at(TARGET),
        "heldout_retention": float(kept_rows.mean() / labels.strong.mean()),
        "heldout_saving": float(1 - strong_rows.mean()),
        "folds": per_fold,
        "curve": _points(c),
    }


def _points(c: Any) -> list[dict[str, float]]:
    out = []
    for wanted in np.linspace(0, 1, 21):
        i = min(int(np.searchsorted(c.strong_share, wanted - 1e-12)), len(c.strong_share) - 1)
        out.append({"strong_share": float(c.strong_share[i]), "retention": float(c.retention[i])})
    return out


def heuristic(labels: Labels) -> dict[str, Any]:
    """Longer prompts to the strong model: no training, so its curve is its held-out curve."""
    lengths = np.array([float(len(p)) for p in labels.prompts])
    c = curve(lengths, labels.cheap, labels.strong)
    return {"curve_saving": c.saving_at(TARGET), "curve": _points(c)}


def latency(router_x: np.ndarray[Any, Any], labels: Labels, options: Options, samples: int,
            settings: LocalEmbeddings) -> dict[str, Any]:  # fmt: skip
    """p50/p95 of the route decision as a request makes it (local MiniLM through its batcher,
    features, the numpy scorer), one request at a time, with the embedding and scorer alone;
    and, in the same run, the embedding of the other graph (float against int8 MatMuls) at the
    same token limit. The two alternate in `ROUNDS` blocks of all the prompts (so both see the
    box's drift) rather than prompt by prompt: onnxruntime's threads spin for a while after a
    run, and one session's spinning would slow the other's next run."""
    from levergate.routing.features import embed_text, vectors
    from levergate.routing.model import Scorer
    from levergate.upstreams.embeddings_local import LocalEmbedder

    fitted = fit(router_x, labels.cheap, labels.strong, options=options, groups=labels.prompts)
    scorer = Scorer(fitted.network, inputs=router_x.shape[1])
    prompts = labels.prompts[:samples]
    flipped = "off" if settings.quantize == "int8" else "int8"
    other = settings.model_copy(update={"quantize": flipped})
    chars = settings.max_tokens * 8

    # A long prompt (a RAG context, say): the embedder reads its first `chars`, the structure
    # features its first TEXT_CAP characters, and only its length whole.
    long = [(p * (LONG_CHARS // max(len(p), 1) + 1))[:LONG_CHARS] for p in prompts[:100]]

    async def decide(local: LocalEmbedder, texts: list[str], total: list[float],
                     embed_only: list[float]) -> None:  # fmt: skip
        for p in texts:
            t0 = time.perf_counter()
            vector = np.array(await local.embed([embed_text(p, text_chars=chars)]))
            t1 = time.perf_counter()
            scorer.score(vectors([p], vector))
            total.append(time.perf_counter() - t0)
            embed_only.append(t1 - t0)

    rounds: list[float] = []  # each round's decision p50, ms: how much the box drifted

    async def run() -> tuple[list[float], list[float], list[float], list[float]]:
        local, baseline = LocalEmbedder(settings), LocalEmbedder(other)
        total: list[float] = []
        embed_only: list[float] = []
        embed_other: list[float] = []
        long_total: list[float] = []
        rounds.clear()
        try:
            for p in prompts[:8]:
                await local.embed([p])
                await baseline.embed([p])
            for _ in range(ROUNDS):
                start = len(total)
                await decide(local, prompts, total, embed_only)
                rounds.append(statistics.median(total[start:]) * 1000)
                await decide(baseline, prompts, [], embed_other)
            await decide(local, long, long_total, [])
        finally:
            await local.aclose()
            await baseline.aclose()
        return total, embed_only, embed_other, long_total

    total, embed_only, embed_other, long_total = asyncio.run(run())
    row = router_x[:1]
    t0 = time.perf_counter()
    for _ in range(1000):
        scorer.score(row)
    scorer_ms = time.perf_counter() - t0  # 1000 calls: seconds x 1000 / 1000 = ms
    ms = [t * 1000 for t in total]
    return {
        "samples": len(ms), "prompts": len(prompts), "decision_p50_ms": statistics.median(ms),
        "round_p50_ms": rounds,
        "long_chars": LONG_CHARS, "long_decision_p50_ms": statistics.median(long_total) * 1000,
        "decision_p95_ms": float(np.percentile(ms, 95)),
        "embedding_p50_ms": statistics.median(t * 1000 for t in embed_only),
        "other_embedding_p50_ms": statistics.median(t * 1000 for t in embed_other),
        "embedder": settings.identity, "other_embedder": other.identity,
        "scorer_ms": scorer_ms, "max_tokens": settings.max_tokens,
        "load": " ".join(f"{v:.1f}" for v in os.getloadavg()),
    }  # fmt: skip


def subjects(path: Path) -> list[str]:
    with path.open(encoding="utf-8", newline="") as handle:
        return [row["subject"] for row in csv.DictReader(handle)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--quick", action="store_true", help="1,500 rows, 3 folds")
    serving = Routing().embeddings
    parser.add_argument("--max-tokens", type=int, default=serving.max_tokens)
    parser.add_argument("--quantize", choices=("int8", "off"), default=serving.quantize)
    parser.add_argument("--features", type=Path,
                        help="an .npz keeping the feature rows between runs")  # fmt: skip
    parser.add_argument("--render", action="store_true",
                        help="rewrite results/routing.md from results/routing.json")  # fmt: skip
    args = parser.parse_args()
    if args.render:
        data = json.loads((RESULTS / "routing.json").read_text())
        write_results("routing", data, markdown(data))
        return
    path = args.data / FILE
    labels = read_labels(path)
    subject = subjects(path)
    folds = 5
    if args.quick:
        keep = np.random.default_rng(0).permutation(len(labels))[:1500]
        labels, subject, folds = labels.subset(keep), [subject[i] for i in keep], 3
    settings = serving.model_copy(update={"max_tokens": args.max_tokens,
                                          "quantize": args.quantize})  # fmt: skip
    embed = embedder(settings)
    spec = spec_for(settings, dimensions=384)
    t0 = time.perf_counter()
    if args.features and args.features.is_file():
        x = np.load(args.features)["x"]
    else:
        x = features(labels.prompts, embed=embed, text_chars=spec.text_chars)
        if args.features:
            np.savez(args.features, x=x)
    embed_seconds = time.perf_counter() - t0
    routers: dict[str, Any] = {}
    for target in ("gain", "strong_needed", "cheap_wrong"):
        options = Options(target=target, folds=folds)
        routers[f"learned ({target})"] = cross_validate(x, labels, labels.prompts, options, folds)
    routers["learned (gain), whole subjects held out"] = cross_validate(
        x, labels, subject, Options(folds=folds), folds
    )
    routers["length heuristic"] = heuristic(labels)
    oracle = curve(labels.strong - labels.cheap, labels.cheap, labels.strong)
    routers["oracle"] = {"curve_saving": oracle.saving_at(TARGET)}
    routers["random"] = {"curve_saving": random_saving(labels.cheap, labels.strong, TARGET)}
    speed = latency(x, labels, Options(folds=folds), 300, settings)
    data = {**stamp(), "file": FILE, "rows": len(labels), "folds": folds, "target": TARGET,
            "cheap_accuracy": float(labels.cheap.mean()),
            "strong_accuracy": float(labels.strong.mean()), "embed_seconds": embed_seconds,
            "published": PUBLISHED, "prices_per_million": PRICES, "routers": routers,
            "latency": speed}  # fmt: skip
    name = "routing"
    if settings != serving:  # another embedder than routing.embeddings serves with
        name += f"-{args.max_tokens}tok" + ("-float" if args.quantize == "off" else "")
    write_results(name, data, markdown(data))


def markdown(d: dict[str, Any]) -> str:
    pct = "{:.1%}".format
    best = d["routers"]["learned (gain)"]
    beat = best["curve_saving"] - PUBLISHED["routellm_mmlu_saving_at_95"]
    lines = [
        "# Learned router on RouteLLM MMLU (Mixtral-8x7B vs GPT-4-1106)",
        "",
        (
            f"{d['date']} · {d['machine']} · {d['file']}: {d['rows']} rows, {d['folds']}-fold CV "
            f"grouped by prompt · cheap {pct(d['cheap_accuracy'])}, strong "
            f"{pct(d['strong_accuracy'])} correct · cost = share of calls to GPT-4 (RouteLLM)"
        ),
        "",
        (
            "| router | saving at 95% (curve, unseen rows) | held-out threshold: quality kept | "
            "held-out threshold: saved |"
        ),
        "|---|---|---|---|",
    ]
    for name, r in d["routers"].items():
        kept = pct(r["heldout_retention"]) if "heldout_retention" in r else "-"
        saved = pct(r["heldout_saving"]) if "heldout_saving" in r else "-"
        lines.append(f"| {name} | {pct(r['curve_saving'])} | {kept} | {saved} |")
    s = d["latency"]
    ratio = PRICES["mixtral-8x7b"]["input"] / PRICES["gpt-4-1106"]["input"]
    dollars = best["curve_saving"] * (1 - ratio)
    lines += [
        "",
        (
            f"RouteLLM published: {pct(PUBLISHED['routellm_mmlu_saving_at_95'])} at 95% (random "
            f"{pct(PUBLISHED['routellm_random_saving_at_95'])}). The learned router (gain target) "
            f"saves {pct(best['curve_saving'])} on rows it never saw: {beat * 100:+.1f} points."
        ),
        "",
        (
            f"Route decision ({s['embedder']} at {s['max_tokens']} tokens + features + scorer), "
            f"one request at a time, {s['samples']} decisions over {s['prompts']} MMLU prompts: "
            f"p50 {s['decision_p50_ms']:.2f} ms (rounds: "
            f"{', '.join(f'{r:.2f}' for r in s['round_p50_ms'])}), p95 "
            f"{s['decision_p95_ms']:.2f} ms; embedding "
            f"alone p50 {s['embedding_p50_ms']:.2f} ms, against {s['other_embedding_p50_ms']:.2f} "
            f"ms for {s['other_embedder']} in the same run, alternating blocks "
            f"({s['other_embedding_p50_ms'] / s['embedding_p50_ms']:.2f}x); scorer "
            f"{s['scorer_ms'] * 1000:.0f} µs; a {s['long_chars']:,}-character prompt: p50 "
            f"{s['long_decision_p50_ms']:.2f} ms. Embedding the {d['rows']} rows took "
            f"{d['embed_seconds']:.0f} s (load average {s['load']})."
        ),
        "",
        (
            "Prices per 1M tokens (published list prices): Mixtral-8x7B $0.60 in / $0.60 out "
            "(Together AI; $0.30-0.90 elsewhere), GPT-4-1106 $10 in / $30 out (OpenAI). A call "
            f"routed to Mixtral costs {ratio:.0%} of the GPT-4 call (input prices; less still "
            f"for output), so in dollars the learned router saves {pct(dollars)} at 95% quality "
            "(share saved x (1 - that ratio))."
        ),
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
