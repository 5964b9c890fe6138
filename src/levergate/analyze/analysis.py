"""One analysis: the baseline and the candidate replayed over the same requests, each changed
lever alone on the baseline, what could not be evaluated and why, and recommendations ranked by
what they save a month. The result is a plain JSON-able dict (`--json`, the HTML page, the
terminal table all read it).

Both sides are replayed by the same model (analyze/replay.py), so a change is the model's
difference between them and the model's own bias cancels; the logged spend is shown beside the
replayed baseline as the model's check against what happened.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

from levergate.analyze.bodies import BodyRun, Embedders, replay_bodies
from levergate.analyze.effects import Effects
from levergate.analyze.fit import ASSUMED, Point, fit_models
from levergate.analyze.inputs import Input, Req
from levergate.analyze.parallel import MIN_REQUESTS, run_all
from levergate.analyze.plan import BODY_LEVERS, Plan, changed, with_lever
from levergate.analyze.quality import caveat
from levergate.analyze.replay import PROVIDER, Timing, replay
from levergate.policies.pricing import Lever
from levergate.report.data import CAVEATS
from levergate.simulator.settings import PromptCacheSettings

__all__ = ["ASSUMED_HIT_SECONDS", "LABELS", "analyse", "timing_of"]

ASSUMED_HIT_SECONDS = 0.002  # an exact-cache hit with no log to measure it: ~2 ms in-process
MONTH_SECONDS = 30 * 86400.0
MAX_RECOMMENDATIONS = 10
LABELS = {
    "exact": "the exact cache", "affinity": "prefix affinity",
    "breakpoints": "automatic prompt-cache breakpoints", "defer": "deferral to batch APIs",
    "prompt_cache_key": "OpenAI prompt_cache_key", "semantic": "the semantic cache",
    "route": "routing", "trim": "trimming", "cascade": "cascades",
}  # fmt: skip
CAVEAT_OF = {
    "exact": Lever.EXACT, "affinity": Lever.PROMPT_CACHE, "breakpoints": Lever.PROMPT_CACHE,
    "defer": Lever.BATCH, "prompt_cache_key": Lever.PROMPT_CACHE, "semantic": Lever.SEMANTIC,
    "route": Lever.ROUTE, "trim": Lever.TRIM, "cascade": Lever.ROUTE,
}  # fmt: skip
NO_TEXT = ("needs the prompt's text, and the input has none: log bodies for the routes to "
           "analyse (request_log.bodies.models) or give an OpenAI request file")  # fmt: skip
ONE_MACHINE = ("the provider model has one prompt cache per key and model (--provider-machines "
               "1), where a prompt_cache_key changes nothing: give the number of cache machines "
               "to model OpenAI's routing by prefix and key")  # fmt: skip
BREAKPOINT_NOTE = (
    "replayed from the logged boundaries (tools, system, documents at the default "
    "document_tokens of 1,024 whatever the candidate sets, the prompt's end) by the gateway's "
    "own placer; a boundary's tokens are estimated from its bytes; the client's own "
    "cache_control breakpoints count against the 4 but their own cache reads and writes are "
    "not replayed; reads only at the request's own breakpoints (as the simulator; Anthropic "
    "also looks back up to 20 blocks)"
)  # fmt: skip


def timing_of(given: Input) -> Timing:
    """The latency model (analyze/fit.py) and the hit latency, from the input's timings."""
    if not given.timings:
        return Timing({}, ASSUMED, ASSUMED_HIT_SECONDS)
    points = [
        (r.alias, Point(r.prompt - r.cached, r.output, r.ttft, r.total))  # writes prefill
        for r in given.requests
        if r.total is not None and not r.hit
    ]
    latency, overall = fit_models(points)
    hit = given.hit_seconds or given.overhead_seconds or ASSUMED_HIT_SECONDS
    return Timing(latency, overall, hit)


def _unevaluable(
    lever: str, given: Input, candidate: Plan, provider: PromptCacheSettings
) -> str | None:
    reqs = given.requests
    if lever == "exact" and not any(r.fp for r in reqs):
        return ("the input has no fingerprints: a trace has sizes and times only, and a log "
                "written before schema 4 has no replay features")  # fmt: skip
    if lever in ("affinity", "breakpoints") and not any(r.blocks and r.block_tokens for r in reqs):
        return "the input has no prefix digests (a log before schema 4, or an Azure trace)"
    aliases = {r.alias for r in reqs}
    if lever == "affinity" and not any(
        len(candidate.endpoints_of(a)) > 1 for a in aliases if candidate.affinity(a)
    ):
        return "no alias balanced by affinity has more than one endpoint: nothing to choose"
    if lever == "breakpoints" and not aliases & candidate.anthropic:
        return "no request went to an alias with an Anthropic upstream"
    if lever == "prompt_cache_key":
        if provider.machines <= 1:
            return ONE_MACHINE
        if not any(r.blocks for r in reqs):
            return "the input has no prefix digests (a log before schema 4, or an Azure trace)"
    if lever == "breakpoints" and not any(r.bp for r in reqs if r.alias in candidate.anthropic):
        return ("the input has no breakpoint boundaries: a log written before they were kept, "
                "a trace, or no chat request to an alias with an Anthropic upstream")  # fmt: skip
    if lever in BODY_LEVERS and not any(r.payload is not None for r in reqs):
        if any(r.body for r in reqs):
            return ("the logged bodies were all cut at request_log.bodies.max_bytes: none can "
                    "be replayed whole (raise the limit for the routes to analyse)")  # fmt: skip
        return NO_TEXT
    return None


def _change(new: float | None, old: float | None) -> float | None:
    return None if new is None or old is None else new - old


def _rate(lever: str, s: Mapping[str, Any]) -> float:
    n = s["requests"] or 1
    if lever == "exact":
        return float((s["exact_hits"] + s["coalesced"]) / n)
    if lever == "defer":
        return float(s["deferred"] / n)
    if lever == "semantic":
        return float(s.get("semantic_hits", 0) / n)
    if lever in ("route", "cascade"):  # answered by another alias / escalated
        return float(s.get("rerouted" if lever == "route" else "escalated", 0) / n)
    if lever == "trim":
        cut = s.get("trimmed_tokens", 0)  # of the prompt tokens before trimming
        return float(cut / (s["prompt_tokens"] + cut)) if s["prompt_tokens"] + cut else 0.0
    return float(s["cached_tokens"] / s["prompt_tokens"]) if s["prompt_tokens"] else 0.0


def compare(lever: str, base: Mapping[str, Any], variant: Mapping[str, Any]) -> dict[str, Any]:
    """A lever's (or the whole candidate's) row: cost, its change, latency changes, hit rate."""
    change = variant["cost_usd"] - base["cost_usd"]
    found: dict[str, Any] = {
        "lever": lever, "evaluable": True, "cost_usd": variant["cost_usd"],
        "change_usd": change,
        "change_share": change / base["cost_usd"] if base["cost_usd"] > 0 else 0.0,
        "hit_rate": _rate(lever, variant), "baseline_hit_rate": _rate(lever, base),
    }  # fmt: skip
    for name in ("ttft_p50_ms", "ttft_p95_ms", "total_p50_ms", "total_p95_ms", "total_mean_ms"):
        found[f"{name[:-3]}_change_ms"] = _change(variant[name], base[name])
    if lever in CAVEAT_OF:
        found["caveat"] = CAVEATS[CAVEAT_OF[lever]]
    return found


def _advice(row: Mapping[str, Any], route: str, monthly: float, share: float) -> str:
    slower = ", at a slower TTFT p95" if (row["ttft_p95_change_ms"] or 0.0) > 0 else ""
    quality = row["caveat"].split(":")[0].split(". ")[0]
    return (f"turn on {LABELS[row['lever']]} for route {route}: -${monthly:,.2f}/month "
            f"({share:.0%} of its spend){slower}; quality: {quality}")  # fmt: skip


def _recommend(
    levers: list[tuple[dict[str, Any], Mapping[str, Any]]], base: Mapping[str, Any], span: float
) -> list[dict[str, Any]]:
    """Each evaluated lever that saves, per route it saves on, ranked by dollars a month."""
    scale = MONTH_SECONDS / max(span, 1.0)
    found = []
    for row, variant in levers:
        for route, paid in base["by_route"].items():
            saved = paid - variant["by_route"].get(route, 0.0)
            if saved <= 1e-12:
                continue
            found.append({
                "lever": row["lever"], "route": route, "saved_usd": saved,
                "monthly_usd": saved * scale, "share": saved / paid if paid > 0 else 0.0,
                "text": _advice(row, route, saved * scale, saved / paid if paid > 0 else 0.0),
            })  # fmt: skip
    found.sort(key=lambda r: -r["monthly_usd"])
    return found[:MAX_RECOMMENDATIONS]


def analyse(
    given: Input, *, baseline: Plan, candidate: Plan,
    progress: Callable[[str], None] | None = None, fork: bool = False,
    embedders: Embedders | None = None, provider: PromptCacheSettings = PROVIDER,
) -> dict[str, Any]:  # fmt: skip
    """The analysis of `given` (module docstring). `fork`: the replays on two cores when the
    input is large enough (analyze/parallel.py; only from a single-threaded process).
    `embedders`: instead of the gateway's own (tests). `provider`: the model of the providers'
    prompt caches (the simulator's settings)."""
    say = progress or (lambda _: None)
    reqs = given.requests
    timing = timing_of(given)
    started = time.perf_counter()
    levers = changed(baseline, candidate)
    problems = {lever: _unevaluable(lever, given, candidate, provider) for lever in levers}
    evaluated = [lever for lever in levers if problems[lever] is None]
    plans = [baseline, candidate, *(with_lever(baseline, candidate, v) for v in evaluated)]
    bodies, failed = replay_bodies(
        plans, reqs, levers=[v for v in evaluated if v in BODY_LEVERS], latency=timing.overall,
        say=say, embedders=embedders, labels=given.labels,
    )  # fmt: skip
    problems.update(failed)
    say(f"replaying {len(reqs):,} requests under {len(plans)} configurations")
    summaries = run_all([partial(_summary, plan, reqs, timing, run.effects, provider)
                         for plan, run in zip(plans, bodies, strict=True)],
                        fork=fork and len(reqs) >= MIN_REQUESTS)  # fmt: skip
    base, cand = summaries[0], summaries[1]
    variants = dict(zip(evaluated, summaries[2:], strict=True))
    measured = dict(zip(evaluated, bodies[2:], strict=True))
    rows: list[dict[str, Any]] = []
    saving: list[tuple[dict[str, Any], Mapping[str, Any]]] = []
    for lever in levers:
        problem = problems[lever]
        if problem is not None:
            rows.append({"lever": lever, "evaluable": False, "reason": problem,
                         "caveat": CAVEATS[CAVEAT_OF[lever]]})  # fmt: skip
            continue
        variant = variants[lever]
        row = _row(lever, base, variant, measured[lever])
        rows.append(row)
        saving.append((row, variant))
    span = reqs[-1].arrival - reqs[0].arrival if reqs else 0.0
    return {
        "object": "levergate.analysis",
        "input": _input(given, span),
        "latency_model": _latency(given, timing),
        "provider_cache": provider.model_dump(),
        "logged_cost_usd": given.logged_cost,
        "baseline": base,
        "candidate": cand,
        "total": compare("total", base, cand),
        "levers": rows,
        "not_evaluable": [r for r in rows if not r["evaluable"]],
        "recommendations": _recommend(saving, base, span),
        "replay_seconds": time.perf_counter() - started,
    }


def _row(
    lever: str, base: Mapping[str, Any], variant: Mapping[str, Any], run: BodyRun
) -> dict[str, Any]:
    """An evaluated lever's row: `compare`'s, with its measured caveat and its notes."""
    row = compare(lever, base, variant)
    if lever in BODY_LEVERS:
        _measured(row, run, lever)
    if lever == "defer" and not variant["deferred"]:
        row["note"] = ("no request carried an x-levergate-deadline at least "
                       "defer.min_deadline_seconds away, nor x-levergate-defer")  # fmt: skip
    if lever == "breakpoints":
        row["note"] = BREAKPOINT_NOTE
    return row


def _summary(
    plan: Plan,
    reqs: Sequence[Req],
    timing: Timing,
    effects: Effects | None = None,
    provider: PromptCacheSettings = PROVIDER,
) -> dict[str, Any]:
    return replay(plan, reqs, timing, effects, provider=provider).summary()


def _measured(row: dict[str, Any], run: BodyRun, lever: str) -> None:
    """A body lever's row given its measured quality caveat and its replay's notes."""
    found = run.measured.get(lever)
    if found is None:
        return
    row["quality"] = found
    row["caveat"] = caveat(lever, found)
    notes = run.notes.get(lever)
    if notes:
        row["note"] = "; ".join(notes)


def _input(given: Input, span: float) -> dict[str, Any]:
    s = given.skipped
    return {
        "source": given.source, "requests": len(given.requests), "span_seconds": span,
        "with_bodies": sum(1 for r in given.requests if r.body),
        "with_fingerprints": sum(1 for r in given.requests if r.fp),
        "malformed": s.malformed, "malformed_lines": s.lines, "errors_left_out": s.errors,
        "without_replay_features": s.without_features, "unfilled_hits": s.unfilled_hits,
    }  # fmt: skip


def _latency(given: Input, timing: Timing) -> dict[str, Any]:
    def one(latency: Any) -> dict[str, Any]:
        found: dict[str, Any] = latency._asdict()
        found["tokens_per_second"] = (None if not math.isfinite(latency.tokens_per_second)
                                      else latency.tokens_per_second)  # fmt: skip
        return found

    how = (
        "fitted to the logged timings per answering model (analyze/fit.py)"
        if given.timings
        else "assumed: the input has no timings (the benchmarks' simulator settings)"
    )
    return {"how": how, "overall": one(timing.overall), "hit_seconds": timing.hit_seconds,
            "models": {m: one(v) for m, v in sorted(timing.latency.items())}}  # fmt: skip
