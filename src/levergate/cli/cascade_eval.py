"""`levergate router eval labels.csv --confidence-col COL`: a cascade's confidence, offline.

    levergate router eval labels.csv --confidence-col mean_logprob [--threshold T]
        [--target-quality Q] [--cheap-cost R] [--json FILE]

Issue 11's rule holds for cascades too: nothing lowers answer quality unmeasured. Live, shadow
sampling measures it (layers/cascade/shadow.py); this measures it before deploying, on rows
labelled with both models' correctness and the score the cascade's check would read from the
cheap answer (its mean or least token logprob, a self-reported confidence, a judge's
probability). A row escalates when its score is below the threshold, as the checks compare
(policies/confidence.py: an answer passes at `score >= threshold`).

The report mirrors the router's: the curve at fixed escalation shares against random
escalation, the lowest escalation reaching the target quality (default 95% of the strong
model's) beside random's and the oracle's, and what one threshold keeps and saves: the given
`--threshold`, else the one the target picks on these rows (optimistic, and said so). The maths
is routing/cascade_curve.py. Cost: the cheap call on every row plus the strong call on the
escalated ones; `--cheap-cost R` prices the cheap call at R x the strong call (default 0,
RouteLLM's convention of counting strong calls only), saving = 1 - escalation - R.
"""

from __future__ import annotations

import argparse
import math
from typing import TYPE_CHECKING, Any

from levergate.cli.output import emit_report
from levergate.config.routing import TRAIN_TARGET_QUALITY
from levergate.errors import ConfigError

if TYPE_CHECKING:
    from levergate.routing.cascade_curve import CascadeCurve, Vector
    from levergate.routing.labels import Labels

SHARES = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


def run(args: argparse.Namespace) -> int:
    from levergate.routing.cascade_curve import cascade_curve
    from levergate.routing.labels import Columns, read_labels

    cheap_cost = 0.0 if args.cheap_cost is None else args.cheap_cost
    if not 0.0 <= cheap_cost < 1.0:
        raise ConfigError("--cheap-cost must be at least 0 and below 1 (a share of the strong "
                          f"call's price), not {cheap_cost}")  # fmt: skip
    target = TRAIN_TARGET_QUALITY if args.target_quality is None else args.target_quality
    columns = Columns(prompt=args.prompt_col, cheap=args.cheap_col, strong=args.strong_col,
                      score=args.confidence_col)  # fmt: skip
    labels = read_labels(args.labels, columns)
    scores = labels.score
    if scores is None:  # pragma: no cover - read_labels reads the column `columns` names
        raise ConfigError(f"labels {args.labels}: no {args.confidence_col!r} read")
    if not labels.strong.any():
        raise ConfigError(f"labels {args.labels}: the strong model is right on no row, so there "
                          "is no quality to retain")  # fmt: skip
    c = cascade_curve(scores, labels.cheap, labels.strong, cheap_cost=cheap_cost)
    chosen = args.threshold is None
    threshold = c.threshold_for(target) if chosen else args.threshold
    report = summary(c, scores, labels, threshold=threshold, target=target)
    report["confidence_column"] = args.confidence_col
    report["threshold_chosen_on_these_rows"] = chosen
    emit_report(report, args, render)
    return 0


def summary(
    c: CascadeCurve, scores: Vector, labels: Labels, *, threshold: float, target: float
) -> dict[str, Any]:
    """The numbers the report prints (and `--json` writes)."""
    from levergate.routing.cascade_curve import (
        measured,
        oracle_escalation,
        oracle_point,
        random_escalation,
    )

    cheap, strong, r = labels.cheap, labels.strong, c.cheap_cost
    points = []
    for wanted in SHARES:
        i = c.at_share(wanted)
        share = float(c.escalation[i])
        randomly = c.cheap_quality + share * (c.strong_quality - c.cheap_quality)
        points.append({"escalation": share, "retention": float(c.retention[i]),
                       "random_retention": randomly / c.strong_quality if c.strong_quality else 0.0,
                       "saving": 1 - share - r})  # fmt: skip
    kept, share = measured(scores, cheap, strong, threshold)
    at = c.escalation_at(target)
    randomly = random_escalation(cheap, strong, target)
    oracle = oracle_escalation(cheap, strong, target)
    oracle_kept, oracle_share = oracle_point(cheap, strong)
    return {
        "mode": "cascade", "rows": len(labels), "cheap_accuracy": c.cheap_quality,
        "strong_accuracy": c.strong_quality, "cheap_cost": r, "cost_convention": convention(r),
        "target_quality": target,
        "escalation_at_target": at, "saving_at_target": 1 - at - r,
        "retention_at_target": float(c.retention[c.point_for(target)]),
        "random_escalation_at_target": randomly, "random_saving_at_target": 1 - randomly - r,
        "oracle_escalation_at_target": oracle, "oracle_saving_at_target": 1 - oracle - r,
        "oracle_all_wrong": {"escalation": oracle_share, "retention": oracle_kept,
                             "saving": 1 - oracle_share - r},
        "threshold": threshold, "retention_at_threshold": kept,
        "escalation_at_threshold": share, "saving_at_threshold": 1 - share - r,
        "curve": points,
    }  # fmt: skip


def convention(cheap_cost: float) -> str:
    if cheap_cost == 0:
        return "strong calls only (RouteLLM's convention; the cheap calls are not counted)"
    return (f"the cheap call on every row at {cheap_cost:.1%} of a strong call, plus the strong "
            "call on escalated rows")  # fmt: skip


def render(r: dict[str, Any]) -> str:
    pct = "{:.1%}".format
    lines = [
        (
            f"{r['rows']} rows: cheap {pct(r['cheap_accuracy'])} correct, strong "
            f"{pct(r['strong_accuracy'])}; cascade on {r['confidence_column']!r}, escalating "
            "a row when its score < the threshold"
        ),
        f"cost: {r['cost_convention']}; saved = 1 - escalated - {r['cheap_cost']:g}",
        "",
        "escalated   quality kept (cascade)   quality kept (random)    saved",
    ]
    lines += [f"{pct(p['escalation']):>9}   {pct(p['retention']):>22}   "
              f"{pct(p['random_retention']):>21}   {pct(p['saving']):>6}"
              for p in r["curve"]]  # fmt: skip
    target, oracle = pct(r["target_quality"]), r["oracle_all_wrong"]
    lines += [
        "",
        (
            f"at {target} of strong quality: cascade escalates {pct(r['escalation_at_target'])} "
            f"(saves {pct(r['saving_at_target'])}), random {pct(r['random_escalation_at_target'])} "
            f"({pct(r['random_saving_at_target'])}), oracle "
            f"{pct(r['oracle_escalation_at_target'])} ({pct(r['oracle_saving_at_target'])})"
        ),
        (
            f"the oracle escalating exactly the cheap model's wrong answers: "
            f"{pct(oracle['escalation'])} escalated, {pct(oracle['retention'])} of strong "
            f"quality kept, {pct(oracle['saving'])} saved"
        ),
        (
            f"at {_which(r)}: {pct(r['retention_at_threshold'])} of strong "
            f"quality kept, {pct(r['escalation_at_threshold'])} escalated, "
            f"{pct(r['saving_at_threshold'])} saved"
        ),
    ]
    if r["threshold_chosen_on_these_rows"]:
        lines.append("note: the threshold was chosen on these very rows, so its figures are "
                     "optimistic; pass it as --threshold on rows it never saw")  # fmt: skip
    return "\n".join(lines)


def _which(r: dict[str, Any]) -> str:
    if r["threshold_chosen_on_these_rows"]:
        return f"threshold {r['threshold']:.4f} (the target's, on these rows)"
    return f"the given threshold {r['threshold']:.4f}"


def check_pick(threshold: float | None, target: float | None) -> None:
    """`--threshold` finite and `--target-quality` in (0, 1], for a router as for a cascade."""
    if threshold is not None and not math.isfinite(threshold):
        raise ConfigError(f"--threshold must be a finite number, not {threshold}")
    if target is not None and not 0 < target <= 1:
        raise ConfigError(f"--target-quality must be above 0 and at most 1, not {target}")
