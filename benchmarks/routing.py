"""The learned router on RouteLLM's MMLU data: cost saved at 95% of GPT-4's quality, on
questions the router never saw, beside a prompt-length rule, random routing and the oracle; and
the time routing adds to a request (embedding included).

Data: ../shared/data/routellm/mmlu_mixtral_vs_gpt4_dev.csv (7,096 MMLU questions, whether
Mixtral-8x7B and GPT-4-1106 each answered correctly), read at run time, never copied here.

Protocol: nested cross-validation over that file only. 5 outer folds, grouped by prompt text,
so the 41 questions that appear twice never straddle train and test. On each outer training
part alone, the regularisation C is chosen from `C_GRID` (the C whose inner 5-fold out-of-fold
saving at 95% is highest), the router is trained with it exactly as `levergate router train`
does, and the same inner out-of-fold scores choose its threshold for 95% retention; the outer
test part is then scored by a router that never saw it and whose settings never saw it either.
The C each fold chose is reported; the shipped default (`TRAIN_C`) is the one they agree on.
Two figures per rule:
  * curve saving: the test rows' pooled cost-quality curve read at 95% retention (RouteLLM's
    own way to state "saving at 95%", thresholds read on the evaluation curve);
  * held-out threshold: the threshold chosen on the training part applied to the test fold,
    reporting the retention it actually reached and what it saved (the stricter figure).
The baseline every saving is quoted beside: a prompt-length rule (longer prompts to the strong
model), its length threshold chosen on the same training parts. A second split holds out whole
subjects (grouped by MMLU subject): how much of the router's edge is knowing which subjects
Mixtral is weak at.

Cost: the RouteLLM convention (saving = share of calls not sent to the strong model), so the
figures compare with RouteLLM's published 45% (random: about 32%). In dollars at published
list prices the saving is nearly the same share, because Mixtral-8x7B ($0.60 / 1M tokens in and
out, Together AI) costs 6% of GPT-4-1106's input price ($10 / 1M in, $30 / 1M out).

    python benchmarks/routing.py [--quick | --smoke] [--max-tokens N] [--quantize int8|off]
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
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # this tree's levergate

from harness import RESULTS, Output, add_output_options, data_file, stamp

from levergate.config import LocalEmbeddingsSettings, RoutingSettings
from levergate.config.routing import TRAIN_C
from levergate.routing.curve import curve, kept_by, measured, random_saving
from levergate.routing.labels import Labels, read_labels
from levergate.routing.model import Target
from levergate.routing.train import Fitted, Options, embedder, features, fit, spec_for

FILE = "routellm/mmlu_mixtral_vs_gpt4_dev.csv"
TARGET = 0.95
# The regularisation searched on each outer training part (inverse L2 strength of the logistic
# regression on standardised features).
C_GRID = (0.0001, 0.0003, 0.001, 0.003, 0.01)
LONG_CHARS = 100_000
PUBLISHED = {"routellm_mmlu_saving_at_95": 0.45, "routellm_random_saving_at_95": 0.32}
PRICES = {"mixtral-8x7b": {"input": 0.6, "output": 0.6}, "gpt-4-1106": {"input": 10, "output": 30}}
Vector = npt.NDArray[np.float64]
Matrix = npt.NDArray[np.float64]
LENGTH = "prompt-length rule"


@dataclass
class HeldOut:
    """A scoring rule's figures on outer test folds it never saw: each fold's rows scored and
    routed at the threshold chosen on that fold's training rows."""

    labels: Labels
    scores: Vector = field(init=False)
    sent: npt.NDArray[np.bool_] = field(init=False)
    folds: list[dict[str, float]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.scores = np.zeros(len(self.labels))
        self.sent = np.zeros(len(self.labels), dtype=bool)

    def add(
        self, rows: npt.NDArray[np.intp], scores: Vector, threshold: float, **extra: float
    ) -> None:
        cheap, strong = self.labels.cheap[rows], self.labels.strong[rows]
        self.scores[rows] = scores
        self.sent[rows] = scores >= threshold
        kept, share = measured(scores, cheap, strong, threshold)
        self.folds.append({"retention": kept, "saving": 1 - share, **extra})

    def result(self) -> dict[str, Any]:
        cheap, strong = self.labels.cheap, self.labels.strong
        kept, share = kept_by(self.sent, cheap, strong)
        c = curve(self.scores, cheap, strong)
        return {"curve_saving": c.saving_at(TARGET), "heldout_retention": kept,
                "heldout_saving": 1 - share, "folds": self.folds, "curve": _points(c)}  # fmt: skip


def splits(groups: list[str], folds: int, seed: int) -> list[tuple[Any, Any]]:
    """The outer folds: grouped (a group never straddles train and test), shuffled by `seed`."""
    from sklearn.model_selection import GroupKFold

    splitter = GroupKFold(n_splits=folds, shuffle=True, random_state=seed)
    return list(splitter.split(np.zeros(len(groups)), groups=groups))


def tuned(
    x: Matrix, labels: Labels, rows: Any, options: Options, grid: tuple[float, ...]
) -> tuple[Fitted, float]:
    """The router for the training rows `rows`, its C chosen on those rows alone: the C whose
    out-of-fold saving at TARGET over them (the inner folds `fit` runs to choose the threshold)
    is highest. The outer test fold plays no part in choosing C or the threshold."""
    best: tuple[float, Fitted, float] | None = None
    for c in grid:
        fitted = fit(x[rows], labels.cheap[rows], labels.strong[rows],
                     options=replace(options, c=c),
                     groups=[labels.prompts[i] for i in rows])  # fmt: skip
        saving = fitted.calibration.saving_at(TARGET)
        if best is None or saving > best[0]:
            best = (saving, fitted, c)
    if best is None:
        raise ValueError("an empty grid of C")
    return best[1], best[2]


def cross_validate(x: Matrix, labels: Labels, outer: list[tuple[Any, Any]], options: Options,
                   grid: tuple[float, ...]) -> dict[str, Any]:  # fmt: skip
    """Nested cross-validation: per outer fold, C and the threshold chosen on its training part
    (`tuned`), the test part scored by that router."""
    from levergate.routing.model import Scorer

    held = HeldOut(labels)
    for train_rows, test_rows in outer:
        fitted, c = tuned(x, labels, train_rows, options, grid)
        scores = Scorer(fitted.network, inputs=x.shape[1]).score(x[test_rows])
        held.add(test_rows, scores, fitted.threshold, c=c)
    return held.result()


def length_rule(labels: Labels, outer: list[tuple[Any, Any]]) -> dict[str, Any]:
    """Longer prompts to the strong model, on the same outer folds as the routers: nothing is
    learned but the length threshold, which is chosen on each training part for TARGET."""
    lengths = np.array([float(len(p)) for p in labels.prompts])
    held = HeldOut(labels)
    for train_rows, test_rows in outer:
        c = curve(lengths[train_rows], labels.cheap[train_rows], labels.strong[train_rows])
        held.add(test_rows, lengths[test_rows], c.threshold_for(TARGET))
    return held.result()


def _points(c: Any) -> list[dict[str, float]]:
    out = []
    for wanted in np.linspace(0, 1, 21):
        i = min(int(np.searchsorted(c.strong_share, wanted - 1e-12)), len(c.strong_share) - 1)
        out.append({"strong_share": float(c.strong_share[i]), "retention": float(c.retention[i])})
    return out


async def _decide(local: Any, texts: list[str], total: list[float], embed_only: list[float], *,
                  scorer: Any, chars: int) -> None:  # fmt: skip
    from levergate.routing.features import embed_text, vectors

    for p in texts:
        t0 = time.perf_counter()
        vector = np.array(await local.embed([embed_text(p, text_chars=chars)]))
        t1 = time.perf_counter()
        scorer.score(vectors([p], vector))
        total.append(time.perf_counter() - t0)
        embed_only.append(t1 - t0)


async def _time_decisions(
    embedders: tuple[LocalEmbeddingsSettings, LocalEmbeddingsSettings],
    scorer: Any,
    texts: tuple[list[str], list[str]],
    *,
    chars: int,
    rounds: int,
    drift: list[float],
) -> tuple[list[float], list[float], list[float], list[float]]:
    """Decision and embedding times of `latency`: the two embedders alternate in `rounds`
    blocks of all the prompts, then the long prompts through the first."""
    from levergate.upstreams.embeddings_local import LocalEmbedder

    prompts, long = texts
    local, baseline = LocalEmbedder(embedders[0]), LocalEmbedder(embedders[1])
    total: list[float] = []
    embed_only: list[float] = []
    embed_other: list[float] = []
    long_total: list[float] = []
    drift.clear()
    try:
        for p in prompts[:8]:
            await local.embed([p])
            await baseline.embed([p])
        for _ in range(rounds):
            start = len(total)
            await _decide(local, prompts, total, embed_only, scorer=scorer, chars=chars)
            drift.append(statistics.median(total[start:]) * 1000)
            await _decide(baseline, prompts, [], embed_other, scorer=scorer, chars=chars)
        await _decide(local, long, long_total, [], scorer=scorer, chars=chars)
    finally:
        await local.aclose()
        await baseline.aclose()
    return total, embed_only, embed_other, long_total


def latency(router_x: Matrix, labels: Labels, options: Options, *, samples: int, rounds: int,
            settings: LocalEmbeddingsSettings) -> dict[str, Any]:  # fmt: skip
    """p50/p95 of the route decision as a request makes it (local MiniLM through its batcher,
    features, the numpy scorer), one request at a time, with the embedding and scorer alone;
    and, in the same run, the embedding of the other graph (float against int8 MatMuls) at the
    same token limit. The two alternate in `rounds` blocks of all the prompts (so both see the
    box's drift) rather than prompt by prompt: onnxruntime's threads spin for a while after a
    run, and one session's spinning would slow the other's next run."""
    from levergate.routing.model import Scorer

    fitted = fit(router_x, labels.cheap, labels.strong, options=options, groups=labels.prompts)
    scorer = Scorer(fitted.network, inputs=router_x.shape[1])
    prompts = labels.prompts[:samples]
    flipped = "off" if settings.quantize == "int8" else "int8"
    other = settings.model_copy(update={"quantize": flipped})
    chars = settings.max_tokens * 8

    # A long prompt (a RAG context, say): the embedder reads its first `chars`, the structure
    # features its first TEXT_CAP characters, and only its length whole.
    long = [(p * (LONG_CHARS // max(len(p), 1) + 1))[:LONG_CHARS] for p in prompts[:100]]

    drift: list[float] = []  # each round's decision p50, ms: how much the box drifted
    total, embed_only, embed_other, long_total = asyncio.run(
        _time_decisions((settings, other), scorer, (prompts, long), chars=chars, rounds=rounds,
                        drift=drift)
    )  # fmt: skip
    row = router_x[:1]
    t0 = time.perf_counter()
    for _ in range(1000):
        scorer.score(row)
    scorer_ms = time.perf_counter() - t0  # 1000 calls: seconds x 1000 / 1000 = ms
    ms = [t * 1000 for t in total]
    return {
        "samples": len(ms), "prompts": len(prompts), "decision_p50_ms": statistics.median(ms),
        "round_p50_ms": drift,
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
    parser.add_argument("--quick", action="store_true", help="1,500 rows, 3 folds")
    serving = RoutingSettings().embeddings
    parser.add_argument("--max-tokens", type=int, default=serving.max_tokens)
    parser.add_argument("--quantize", choices=("int8", "off"), default=serving.quantize)
    parser.add_argument("--features", type=Path,
                        help="an .npz keeping the feature rows between runs")  # fmt: skip
    parser.add_argument("--render", action="store_true",
                        help="rewrite results/routing.md from results/routing.json")  # fmt: skip
    add_output_options(parser)
    args = parser.parse_args()
    out = Output.of(args)
    if args.render:
        data = json.loads((RESULTS / "routing.json").read_text())
        out.write("routing", data, markdown(data))
        return
    path = data_file(FILE)
    labels, subject = read_labels(path), subjects(path)
    folds, grid, samples, rounds = 5, C_GRID, 300, 5
    targets: tuple[Target, ...] = ("gain", "strong_needed", "cheap_wrong")
    if args.quick or args.smoke:
        keep = np.random.default_rng(0).permutation(len(labels))[: 200 if args.smoke else 1500]
        labels, subject = labels.subset(keep), [subject[i] for i in keep]
        folds = 2 if args.smoke else 3
    if args.smoke:
        grid, samples, rounds, targets = (TRAIN_C, TRAIN_C * 3), 5, 1, ("gain",)
    settings = serving.model_copy(update={"max_tokens": args.max_tokens,
                                          "quantize": args.quantize})  # fmt: skip
    t0 = time.perf_counter()
    x = feature_rows(labels, settings, args.features)
    embed_seconds = time.perf_counter() - t0
    by_prompt = splits(labels.prompts, folds, seed=0)
    routers: dict[str, Any] = {}
    for target in targets:
        options = Options(target=target, folds=folds)
        routers[f"learned ({target})"] = cross_validate(x, labels, by_prompt, options, grid)
    routers[LENGTH] = length_rule(labels, by_prompt)
    by_subject = splits(subject, folds, seed=0)
    routers["learned (gain), whole subjects held out"] = cross_validate(
        x, labels, by_subject, Options(folds=folds), grid
    )
    routers[f"{LENGTH}, whole subjects held out"] = length_rule(labels, by_subject)
    oracle = curve(labels.strong - labels.cheap, labels.cheap, labels.strong)
    routers["oracle"] = {"curve_saving": oracle.saving_at(TARGET)}
    routers["random"] = {"curve_saving": random_saving(labels.cheap, labels.strong, TARGET)}
    speed = latency(x, labels, Options(folds=folds), samples=samples, rounds=rounds,
                    settings=settings)  # fmt: skip
    data = {**stamp(), "file": FILE, "rows": len(labels), "folds": folds, "target": TARGET,
            "c_grid": list(grid), "shipped_c": TRAIN_C,
            "cheap_accuracy": float(labels.cheap.mean()),
            "strong_accuracy": float(labels.strong.mean()), "embed_seconds": embed_seconds,
            "published": PUBLISHED, "prices_per_million": PRICES, "routers": routers,
            "latency": speed}  # fmt: skip
    name = "routing"
    if settings != serving:  # another embedder than routing.embeddings serves with
        name += f"-{args.max_tokens}tok" + ("-float" if args.quantize == "off" else "")
    out.write(name, data, markdown(data))


def feature_rows(labels: Labels, settings: LocalEmbeddingsSettings, keep: Path | None) -> Matrix:
    """The router's feature rows of every prompt (from `keep`, an .npz, when it exists)."""
    if keep is not None and keep.is_file():
        return np.asarray(np.load(keep)["x"], dtype=np.float64)
    spec = spec_for(settings, dimensions=384)
    x = features(labels.prompts, embed=embedder(settings), text_chars=spec.text_chars)
    if keep is not None:
        np.savez(keep, x=x)
    return x


def _row(name: str, r: dict[str, Any]) -> str:
    pct = "{:.1%}".format
    kept = pct(r["heldout_retention"]) if "heldout_retention" in r else "-"
    saved = pct(r["heldout_saving"]) if "heldout_saving" in r else "-"
    chosen = [f["c"] for f in r.get("folds", []) if "c" in f]
    c = ", ".join(f"{v:g}" for v in chosen) if chosen else "-"
    return f"| {name} | {pct(r['curve_saving'])} | {kept} | {saved} | {c} |"


def _latency_paragraph(d: dict[str, Any]) -> str:
    s = d["latency"]
    return (
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
    )


def markdown(d: dict[str, Any]) -> str:
    pct = "{:.1%}".format
    best, length = d["routers"]["learned (gain)"], d["routers"][LENGTH]
    lines = [
        "# Learned router on RouteLLM MMLU (Mixtral-8x7B vs GPT-4-1106)",
        "",
        (
            f"{d['date']} · {d['machine']} · {d['file']}: {d['rows']} rows, nested "
            f"{d['folds']}-fold CV grouped by prompt (C from {d['c_grid']} and the threshold "
            f"chosen on each outer training part alone; shipped C {d['shipped_c']:g}) · cheap "
            f"{pct(d['cheap_accuracy'])}, strong {pct(d['strong_accuracy'])} correct · cost = "
            "share of calls to GPT-4 (RouteLLM)"
        ),
        "",
        (
            "| rule | saving at 95% (curve, unseen rows) | held-out threshold: quality kept | "
            "held-out threshold: saved | C chosen per outer fold |"
        ),
        "|---|---|---|---|---|",
        *(_row(name, r) for name, r in d["routers"].items()),
    ]
    ratio = PRICES["mixtral-8x7b"]["input"] / PRICES["gpt-4-1106"]["input"]
    beat = best["curve_saving"] - PUBLISHED["routellm_mmlu_saving_at_95"]
    lines += [
        "",
        (
            f"On rows it never saw, the learned router (gain target) saves "
            f"{pct(best['curve_saving'])} of GPT-4 calls at 95% of its quality "
            f"({pct(best['heldout_saving'])} at {pct(best['heldout_retention'])} kept with the "
            f"threshold from the training part); **the prompt-length rule, on the same folds: "
            f"{pct(length['curve_saving'])}** ({pct(length['heldout_saving'])} at "
            f"{pct(length['heldout_retention'])}): the router's edge over it is "
            f"{(best['curve_saving'] - length['curve_saving']) * 100:+.1f} points. RouteLLM "
            f"published {pct(PUBLISHED['routellm_mmlu_saving_at_95'])} at 95% for its general "
            f"routers (random {pct(PUBLISHED['routellm_random_saving_at_95'])}); this router was "
            f"trained on MMLU labels of this very model pair ({beat * 100:+.1f} points), so the "
            "length rule is the fairer comparison."
        ),
        "",
        _latency_paragraph(d),
        "",
        (
            "Prices per 1M tokens (published list prices): Mixtral-8x7B $0.60 in / $0.60 out "
            "(Together AI; $0.30-0.90 elsewhere), GPT-4-1106 $10 in / $30 out (OpenAI). A call "
            f"routed to Mixtral costs {ratio:.0%} of the GPT-4 call (input prices; less still "
            f"for output), so in dollars at 95% quality the learned router saves "
            f"{pct(best['curve_saving'] * (1 - ratio))} and the length rule "
            f"{pct(length['curve_saving'] * (1 - ratio))} (share saved x (1 - that ratio))."
        ),
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
