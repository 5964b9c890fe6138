"""The analysis (analyze/analysis.py's dict) as the terminal's table: the two sides, each lever
alone, what could not be evaluated and why, the recommendations."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from levergate.analyze.analysis import LABELS

__all__ = ["table"]


def _usd(value: float | None) -> str:
    if value is None:
        return "-"
    sign = "-" if value < 0 else ""
    return f"{sign}${abs(value):,.6f}" if abs(value) < 10 else f"{sign}${abs(value):,.2f}"


def _ms(value: float | None, *, sign: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:+,.1f}" if sign else f"{value:,.1f}"


def _share(value: float) -> str:
    return f"{value:+.1%}"


def _grid(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                      for i, (c, w) in enumerate(zip(row, widths, strict=True))).rstrip()
            for row in rows]  # fmt: skip


def _sides(a: Mapping[str, Any]) -> list[str]:
    base, cand, total = a["baseline"], a["candidate"], a["total"]
    rows = [["", "baseline", "candidate", "change"],
            ["cost", _usd(base["cost_usd"]), _usd(cand["cost_usd"]),
             f"{_usd(total['change_usd'])} ({_share(total['change_share'])})"]]  # fmt: skip
    rows += [
        [f"{n.replace('_', ' ')} ms", _ms(base[f"{n}_ms"]), _ms(cand[f"{n}_ms"]),
         _ms(total[f"{n}_change_ms"], sign=True)]
        for n in ("ttft_p50", "ttft_p95", "total_p50", "total_p95")
    ]  # fmt: skip
    counts = (("exact_hits", "exact-cache hits"), ("coalesced", "coalesced"),
              ("cached_tokens", "prompt tokens cached"),
              ("written_tokens", "prompt tokens written to a cache"),
              ("deferred", "deferred"))  # fmt: skip
    rows += [[label, f"{base[n]:,}", f"{cand[n]:,}", f"{cand[n] - base[n]:+,}"]
             for n, label in counts]  # fmt: skip
    # The body levers' counts (analyze/bodies.py), where either side has any.
    bodies = (("semantic_hits", "semantic-cache hits"), ("rerouted", "answered by another alias"),
              ("escalated", "cascade escalations"), ("trimmed_tokens", "prompt tokens trimmed"),
              ("refused", "refused by trimming"))  # fmt: skip
    rows += [[label, f"{base.get(n, 0):,}", f"{cand.get(n, 0):,}",
              f"{cand.get(n, 0) - base.get(n, 0):+,}"]
             for n, label in bodies if base.get(n) or cand.get(n)]  # fmt: skip
    return _grid(rows)


def _levers(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    evaluated = [r for r in rows if r["evaluable"]]
    if not evaluated:
        return ["(no lever the candidate changes could be evaluated)"]
    grid = [["lever alone", "cost change", "share", "TTFT p95 ms", "total p95 ms", "hit rate"]]
    grid += [
        [LABELS[r["lever"]], _usd(r["change_usd"]), _share(r["change_share"]),
         _ms(r["ttft_p95_change_ms"], sign=True), _ms(r["total_p95_change_ms"], sign=True),
         f"{r['baseline_hit_rate']:.1%} -> {r['hit_rate']:.1%}"]
        for r in evaluated
    ]  # fmt: skip
    lines = _grid(grid)
    lines += ["", "quality caveats:"]
    lines += [f"  {LABELS[r['lever']]}: {r['caveat']}" for r in evaluated]
    notes = [f"  {LABELS[r['lever']]}: {r['note']}" for r in evaluated if r.get("note")]
    return lines + (["", "notes:", *notes] if notes else [])


def table(a: Mapping[str, Any]) -> str:
    i = a["input"]
    hours = i["span_seconds"] / 3600.0
    out = [f"levergate analyze: {i['requests']:,} requests from {i['source']} over {hours:,.2f} h",
           f"latency model: {a['latency_model']['how']}", ""]  # fmt: skip
    if not a["levers"]:
        out += ["The candidate changes no lever the analysis knows against the baseline.", ""]
    out += [*_sides(a), "", *_levers(a["levers"])]
    if a["not_evaluable"]:
        out += ["", "not evaluable:"]
        out += [f"  {LABELS[r['lever']]}: {r['reason']}" for r in a["not_evaluable"]]
    if a["recommendations"]:
        out += ["", "recommendations:"]
        out += [f"  {n}. {r['text']}" for n, r in enumerate(a["recommendations"], 1)]
    logged = a["logged_cost_usd"]
    if logged is not None:
        off = (a["baseline"]["cost_usd"] / logged - 1.0) if logged > 0 else 0.0
        out += ["", (f"check: the log says these requests cost {_usd(logged)}; the baseline "
                f"replayed, {_usd(a['baseline']['cost_usd'])} ({off:+.1%})")]  # fmt: skip
    skipped = [f"{i['malformed']:,} malformed lines" if i["malformed"] else "",
               f"{i['errors_left_out']:,} failed requests" if i["errors_left_out"] else "",
               f"{i['without_replay_features']:,} without replay features"
               if i["without_replay_features"] else ""]  # fmt: skip
    if any(skipped):
        out += ["", "left out: " + ", ".join(s for s in skipped if s)]
    return "\n".join(out)
