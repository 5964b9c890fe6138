"""Each body lever's quality caveat, measured rather than assumed:

    semantic   the shipped evaluation's false hits at the candidate's threshold and guards
               (benchmarks/cache_semantic_eval.py on QQP's labelled pairs; its qqp_dev curves
               ship as semantic_eval.json, checked against the results file by the tests), and
               what that precision means for the hits the replay predicts
    route      each learned route's router file's out-of-fold retention and strong share at the
               served threshold, and the log's live shadow labels where it has them
    cascade    the escalation rate the replay measured, over the requests whose acceptance it
               could decide offline
    trim       what was cut (tokens, requests, refusals): trimming drops history, whose effect
               on answers is not measured by levergate

`caveat(lever, measured)` is the sentence the table and the recommendations print.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

from levergate.config import CacheSettings

__all__ = ["caveat", "semantic_quality"]


@cache
def evaluation() -> dict[str, Any]:
    text = resources.files("levergate.analyze").joinpath("semantic_eval.json").read_text()
    found: dict[str, Any] = json.loads(text)
    return found


def semantic_quality(cache_settings: CacheSettings, hits: int) -> dict[str, Any]:
    """The evaluated row at the highest evaluated threshold not above the candidate's (a lower
    threshold lets more pairs through, so this errs towards more false hits); with every
    shipped guard on, the guarded curve, else the unguarded one (an upper bound)."""
    e = evaluation()
    semantic = cache_settings.semantic
    guarded = set(e["guards"]) <= set(semantic.guards)
    curve = e["with_guards"] if guarded else e["without_guards"]
    below = [r for r in curve if r["threshold"] <= semantic.threshold + 1e-9]
    row = below[-1] if below else curve[0]
    wrong = hits * (1.0 - row["precision"])
    return {
        "source": e["source"], "set": e["set"], "pairs": e["pairs"],
        "threshold": semantic.threshold, "evaluated_threshold": row["threshold"],
        "guards": "all shipped guards" if guarded else "not all shipped guards: unguarded curve",
        "false_hit_rate": row["false_hit_rate"], "precision": row["precision"],
        "recall": row["recall"], "expected_wrong_hits": wrong,
    }  # fmt: skip


def caveat(lever: str, measured: dict[str, Any]) -> str:
    """The measured quality caveat of a body lever, as one sentence."""
    if lever == "semantic":
        return (f"false-hit rate {measured['false_hit_rate']:.2%}, precision "
                f"{measured['precision']:.1%} at threshold {measured['evaluated_threshold']:g} "
                f"({measured['guards']}; {measured['set']}, {measured['pairs']:,} labelled "
                f"pairs): about {measured['expected_wrong_hits']:.1f} of the predicted hits "
                "would answer a different question")  # fmt: skip
    if lever == "route":
        parts = []
        for name, r in sorted(measured.get("learned", {}).items()):
            text = (f"route {name}: retention {r['retention']:.1%} of {r['strong']}'s quality "
                    f"at threshold {r['threshold']:.3f} (router file's out-of-fold curve, "
                    f"{r['strong_share']:.1%} strong)")  # fmt: skip
            live = measured.get("live", {}).get(name) or {}
            if live.get("agreement") is not None:
                text += (f"; live: the strong model agreed with {live['agreement']:.1%} of "
                         f"{live['labels']:,} shadowed answers (lg_labels)")  # fmt: skip
            if live.get("gauge") is not None:
                text += f"; live levergate_route_quality_retention {live['gauge']:.1%}"
            parts.append(text)
        return "; ".join(parts) or "rules only: no learned router, quality not measured"
    if lever == "cascade":
        rate = measured.get("escalation_rate")
        said = "unknown" if rate is None else f"{rate:.1%}"
        text = (f"escalation rate {said} over {measured['known']:,} of "
                f"{measured['cascaded']:,} cascaded requests")  # fmt: skip
        unknown = measured.get("unknown") or {}
        if unknown:
            text += "; not decidable offline: " + ", ".join(
                f"{n:,} ({why})" for why, n in sorted(unknown.items())
            )
        return text
    return (f"{measured['tokens']:,} prompt tokens cut from {measured['trimmed']:,} of "
            f"{measured['seen']:,} requests, {measured['refused']:,} refused, "
            f"{measured.get('capped', 0):,} answers capped ({measured.get('output_cut', 0):,} "
            "output tokens fewer): dropped history is not shown to the model, and a capped "
            "answer ends early (their effect on answers is not measured)")  # fmt: skip
