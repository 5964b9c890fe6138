"""Cascades: escalation rate and quality on real labels, the mechanism through the gateway, and
the overhead of a cascade that does not escalate. Writes results/cascade.{json,md}.

1. Quality (RouteLLM's MMLU dev labels: per question, whether Mixtral-8x7B and GPT-4-1106 were
   right). The labels are real; a deployed cascade's confidence is not in them, so each
   cascade here is labelled by where its confidence comes from:
   - oracle: escalate exactly when the cheap answer is wrong (real labels; the ceiling);
   - random: escalate a random share (real labels; the floor any signal must beat);
   - SIMULATED confidences: a score drawn N(+d/2, 1) when the cheap answer is right and
     N(-d/2, 1) when wrong, d chosen for an AUC of 0.65 / 0.75 / 0.85. The threshold is chosen
     on one half of the questions (the lowest escalation reaching 95% of GPT-4's accuracy there)
     and reported on the other half.
   Cost: per question, its prompt tokens (chars / 4) plus 2 output tokens at published prices
   (GPT-4-1106 $10 / $30, Mixtral-8x7B $0.60 / $0.60 per 1M tokens); a cascade always pays
   the cheap call and pays the strong one too when it escalates.
2. Mechanism: the real gateway in front of the simulator with a seeded 30% of prompts hard;
   the escalation rate the mean-logprob check produces (SIMULATED hardness).
3. What the live gauge would read (`levergate_cascade_quality_retention`, shadow sampling):
   for the oracle and each SIMULATED cascade, a share of the accepted answers sampled and
   "compared" with GPT-4's, against the retention the labels give. The labels say whether each
   model was right, not what it answered: two right answers agree, a right and a wrong one
   disagree, and two wrong ones may or may not have chosen the same letter, so the gauge is
   given both ways (it lies between).
4. Overhead: `cascade:small>large` on easy prompts (one cheap call with logprobs, one check)
   against the cheap alias called directly, through the proxy over loopback; a ratio in one run.

    PYTHONPATH=src python benchmarks/cascade.py [--overhead-requests 400]
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import math
import random
import statistics
import time
from pathlib import Path
from typing import Any

import httpx
from harness import Output, add_output_options, data_file, stamp

from levergate.config import Settings
from levergate.core.call import Trace
from levergate.gateway import Gateway
from levergate.policies.shadow import retention
from levergate.server.run import serving
from levergate.simulator import SimSettings, run_simulator
from levergate.simulator.hardness import is_hard
from levergate.simulator.tokens import chat_prompt

LABELS = "routellm/mmlu_mixtral_vs_gpt4_dev.csv"
PRICES = {"cheap": (0.60, 0.60), "strong": (10.0, 30.0)}  # $ per 1M input, output tokens
OUTPUT_TOKENS = 2
TARGET = 0.95
SHADOW_RATES = (0.05, 1.0)


def load_labels(path: Path) -> list[tuple[bool, bool, int]]:
    """(cheap correct, strong correct, prompt tokens) per question."""
    with path.open(newline="", encoding="utf-8") as f:
        return [(_true(row["mixtral_8x7b_correct"]), _true(row["gpt4_1106_correct"]),
                 max(1, len(row["prompt"]) // 4)) for row in csv.DictReader(f)]  # fmt: skip


def _true(text: str) -> bool:
    return text.strip().lower() in {"true", "1"}


def cost(model: str, tokens: int) -> float:
    price_in, price_out = PRICES[model]
    return (tokens * price_in + OUTPUT_TOKENS * price_out) / 1e6


def outcome(
    rows: list[tuple[bool, bool, int]], escalate: list[bool], *, cheap_first: bool = True
) -> dict[str, float]:
    """`cheap_first` False: no cheap call at all (the always-strong baseline)."""
    n = len(rows)
    correct = sum((s if e else c) for (c, s, _), e in zip(rows, escalate, strict=True))
    spent = sum(cost("cheap", t) * cheap_first + (cost("strong", t) if e else 0.0)
                for (_, _, t), e in zip(rows, escalate, strict=True))  # fmt: skip
    strong_cost = sum(cost("strong", t) for _, _, t in rows)
    strong_quality = sum(s for _, s, _ in rows) / n
    return {
        "escalation_rate": sum(escalate) / n,
        "accuracy": correct / n,
        "quality_retention": (correct / n) / strong_quality,
        "cost_saving": 1 - spent / strong_cost,
    }


def threshold_for(scores: list[float], rows: list[tuple[bool, bool, int]]) -> float:
    """The threshold with the least escalation whose accuracy reaches TARGET x strong's."""
    strong = sum(s for _, s, _ in rows) / len(rows)
    for cut in sorted({-math.inf, *scores}):
        escalate = [score <= cut for score in scores] if cut != -math.inf else [False] * len(rows)
        if outcome(rows, escalate)["accuracy"] >= TARGET * strong:
            return cut
    return math.inf


def quality_section(seed: int, *, limit: int | None = None) -> dict[str, Any]:
    rows = load_labels(data_file(LABELS))
    rng = random.Random(seed)
    if limit is not None:
        rows = rng.sample(rows, min(limit, len(rows)))
    order = list(range(len(rows)))
    rng.shuffle(order)
    half = len(rows) // 2
    train = [rows[i] for i in order[:half]]
    test = [rows[i] for i in order[half:]]
    results: dict[str, Any] = {
        "questions": len(rows), "test_questions": len(test),
        "cheap_accuracy": sum(c for c, _, _ in rows) / len(rows),
        "strong_accuracy": sum(s for _, s, _ in rows) / len(rows),
        "always_strong": outcome(test, [True] * len(test), cheap_first=False),
        "always_cheap": outcome(test, [False] * len(test)),
        "oracle (real labels)": outcome(test, [not c for c, _, _ in test]),
    }  # fmt: skip
    oracle_rate = results["oracle (real labels)"]["escalation_rate"]
    for rate in (oracle_rate, 0.5):
        draws = [rng.random() < rate for _ in test]
        results[f"random {rate:.0%} (real labels)"] = outcome(test, draws)
    for auc in (0.65, 0.75, 0.85):
        d = math.sqrt(2) * _inverse_phi(auc)  # AUC of two unit normals d apart: phi(d / sqrt 2)

        def score(cheap_right: bool, d: float = d) -> float:
            return rng.gauss(d / 2 if cheap_right else -d / 2, 1.0)

        train_scores = [score(c) for c, _, _ in train]
        cut = threshold_for(train_scores, train)
        test_scores = [score(c) for c, _, _ in test]
        name = f"SIMULATED confidence, AUC {auc:.2f}"
        escalate = [s <= cut for s in test_scores]
        results[name] = {**outcome(test, escalate), "threshold": cut,
                         "shadow": shadow_readings(test, escalate, rng)}  # fmt: skip
    oracle = results["oracle (real labels)"]
    oracle["shadow"] = shadow_readings(test, [not c for c, _, _ in test], rng)
    return results


def shadow_readings(
    rows: list[tuple[bool, bool, int]], escalate: list[bool], rng: random.Random
) -> dict[str, dict[str, float | None]]:
    """The retention gauge after these requests, per sampling rate (module docstring, 3):
    `low` counts two wrong answers as disagreeing, `high` as agreeing."""
    accepted = [row for row, e in zip(rows, escalate, strict=True) if not e]
    readings: dict[str, dict[str, float | None]] = {}
    for rate in SHADOW_RATES:
        sampled = [(c, s) for c, s, _ in accepted if rng.random() < rate]
        right = sum(c and s for c, s in sampled)
        wrong = sum(not c and not s for c, s in sampled)
        n = len(sampled)
        counts = {"accepted": len(accepted), "answered": len(rows)}
        readings[f"{rate:g}"] = {
            "samples": n,
            "low": retention(**counts, agree=right, disagree=n - right),
            "high": retention(**counts, agree=right + wrong, disagree=n - right - wrong),
        }
    return readings


def _inverse_phi(p: float) -> float:
    return statistics.NormalDist().inv_cdf(p)


def _gateway_settings(sim_url: str) -> dict[str, Any]:
    return {
        "server": {"port": 0},
        "upstreams": [{"name": "sim", "base_url": sim_url}],
        "models": [{"name": "small", "upstream": "sim", "upstream_model": "sim-small"},
                   {"name": "large", "upstream": "sim", "upstream_model": "sim-large"}],
        "cascade": {"checks": [{"kind": "mean_logprob", "threshold": -0.5}]},
    }  # fmt: skip


async def mechanism_section(requests: int) -> dict[str, Any]:
    hard = {"share": 0.3, "strong_models": ["sim-large"]}
    async with (
        run_simulator(SimSettings.model_validate({"port": 0, "hard": hard})) as sim,
        Gateway(Settings.load(**_gateway_settings(sim.base_url))) as gateway,
    ):
        escalated = agreed = hard_count = 0
        for i in range(requests):
            trace = Trace()
            body = {"model": "cascade:small>large", "max_tokens": 8,
                    "messages": [{"role": "user", "content": f"Question number {i}?"}]}  # fmt: skip
            await gateway.serve(gateway.make_call("chat", body, trace=trace))
            hard = is_hard(sim.settings.hard, model="sim-small", text=chat_prompt(body), seed=0)
            escalated += trace.escalations
            hard_count += hard
            agreed += hard == (trace.escalations > 0)
    return {"requests": requests, "hard_share_configured": 0.3,
            "hard_share_drawn": hard_count / requests,
            "escalation_rate": escalated / requests,
            "escalated_exactly_the_hard_ones": agreed / requests}  # fmt: skip


async def overhead_section(requests: int) -> dict[str, Any]:
    async with (
        run_simulator(SimSettings(port=0)) as sim,
        Gateway(Settings.load(**_gateway_settings(sim.base_url))) as gateway,
        serving(gateway) as url,
        httpx.AsyncClient(base_url=url) as http,
    ):
        times: dict[str, list[float]] = {"direct": [], "cascade": []}
        overhead: dict[str, list[float]] = {"direct": [], "cascade": []}
        warm = min(50, requests)
        for i in range(requests + warm):
            for name, model in (("direct", "small"), ("cascade", "cascade:small>large")):
                body = {"model": model, "messages": [{"role": "user", "content": f"easy {i}"}]}
                start = time.perf_counter()
                response = await http.post("/chat/completions", json=body)
                elapsed = time.perf_counter() - start
                accepted = response.headers.get("x-levergate-cascade", "accepted") == "accepted"
                if response.status_code != 200 or not accepted:
                    raise RuntimeError(f"{name}: {response.status_code} {response.text[:200]}")
                if i >= warm:  # the first rounds warm up
                    times[name].append(elapsed * 1000)
                    overhead[name].append(float(response.headers["x-levergate-overhead-ms"]))
    med = {k: statistics.median(v) for k, v in times.items()}
    over = {k: statistics.median(v) for k, v in overhead.items()}
    return {
        "requests": requests,
        "median_ms": med,
        "median_gateway_overhead_ms": over,
        "latency_ratio_cascade_vs_direct": med["cascade"] / med["direct"],
        "overhead_added_ms": over["cascade"] - over["direct"],
    }


def markdown(data: dict[str, Any]) -> str:
    q, m, o = data["quality"], data["mechanism"], data["overhead"]
    intro = (
        f"{q['questions']} questions; cheap {q['cheap_accuracy']:.1%}, strong "
        f"{q['strong_accuracy']:.1%} correct. Thresholds chosen on one half for 95% of GPT-4's "
        f"accuracy there, figures on the other ({q['test_questions']} questions). Rows marked "
        "SIMULATED use confidences drawn from a model of a signal with that AUC, not a real "
        "model's logprobs; oracle and random rows use the real labels only."
    )
    lines = [
        "# Cascades", "", f"{data['stamp']['date']} on {data['stamp']['machine']}", "",
        "## Quality on RouteLLM MMLU labels (Mixtral-8x7B > GPT-4-1106)", "", intro, "",
        "| cascade | escalation rate | accuracy | quality retention | cost saving vs GPT-4 |",
        "|---|---|---|---|---|",
    ]  # fmt: skip
    for name, r in q.items():
        if isinstance(r, dict):
            lines.append(
                f"| {name} | {r['escalation_rate']:.1%} | {r['accuracy']:.1%} | "
                f"{r['quality_retention']:.1%} | {r['cost_saving']:.1%} |"
            )
    lines += ["", "## What the live retention gauge reads (shadow sampling)", "",
              shadow_note(q["oracle (real labels)"]["quality_retention"]), "",
              "| cascade | retention (labels) | gauge, 5% sampled | gauge, all sampled |",
              "|---|---|---|---|"]  # fmt: skip
    for name, r in q.items():
        if isinstance(r, dict) and "shadow" in r:
            few, every = r["shadow"]["0.05"], r["shadow"]["1"]
            lines.append(f"| {name} | {r['quality_retention']:.1%} | {_reading(few)} | "
                         f"{_reading(every)} |")  # fmt: skip
    mechanism = (
        f"{m['requests']} requests to `cascade:small>large` (mean-logprob check at -0.5), the "
        f"simulator making a seeded {m['hard_share_configured']:.0%} of prompts hard in "
        f"expectation ({m['hard_share_drawn']:.1%} of these prompts by its hash): escalation "
        f"rate {m['escalation_rate']:.1%}; escalated exactly when the prompt was hard in "
        f"{m['escalated_exactly_the_hard_ones']:.1%} of requests."
    )
    med, over = o["median_ms"], o["median_gateway_overhead_ms"]
    ratio = (
        f"Latency ratio cascade / direct: **{o['latency_ratio_cascade_vs_direct']:.2f}x**; the "
        f"cascade adds {o['overhead_added_ms']:.3f} ms of gateway time (asking for logprobs, "
        "parsing them, the check, re-serialising the answer without them)."
    )
    lines += [
        "", "## Mechanism through the gateway (SIMULATED hardness)", "", mechanism, "",
        "## Overhead of a cascade that does not escalate", "",
        (f"{o['requests']} sequential requests each way through the proxy (loopback simulator, "
         "zero latency), interleaved:"), "",
        "| | median latency ms | median gateway overhead ms |", "|---|---|---|",
        f"| `small` direct | {med['direct']:.3f} | {over['direct']:.3f} |",
        f"| `cascade:small>large` | {med['cascade']:.3f} | {over['cascade']:.3f} |", "",
        ratio, "",
    ]  # fmt: skip
    return "\n".join(lines)


def shadow_note(oracle: float) -> str:
    return (
        "The gauge treats GPT-4's answer as the reference: an accepted answer that disagrees "
        "with it counts as lost quality even when the cheap model was the one that was right, so "
        "the gauge reads low where the cheap model beats the strong one (the oracle keeps "
        f"{oracle:.1%} by the labels; no agreement can show more than 100%). Each cell: the "
        "gauge with two wrong answers counted as disagreeing, then as agreeing (the labels "
        "cannot tell), and the samples compared."
    )


def _reading(r: dict[str, Any]) -> str:
    if r["low"] is None:
        return "no samples"
    return f"{r['low']:.1%} to {r['high']:.1%} ({r['samples']} samples)"


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--overhead-requests", type=int, default=400)
    parser.add_argument("--mechanism-requests", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    add_output_options(parser)
    args = parser.parse_args()
    out = Output.of(args)
    limit = None
    if args.smoke:
        limit, args.mechanism_requests, args.overhead_requests = 400, 20, 10
    data = {
        "stamp": stamp(),
        "quality": quality_section(args.seed, limit=limit),
        "mechanism": await mechanism_section(args.mechanism_requests),
        "overhead": await overhead_section(args.overhead_requests),
    }
    out.write("cascade", data, markdown(data))


if __name__ == "__main__":
    asyncio.run(main())
