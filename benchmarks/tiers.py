"""Let the deadline pick the price (issue 26 §4): spend and deadline misses of four ways to send
the same traffic, on the Azure LLM inference trace's arrival times and sizes.

Each request of the trace (its arrival time, prompt and output tokens) gets a seeded deadline
class: interactive (seconds), background (minutes) or overnight (hours). It goes through the
official OpenAI SDK into levergate's whole pipeline (in-process) and on to the simulator over
loopback, which sells `gpt-5-mini` at three tiers: default; flex (half price, slower, its
capacity exhausted when too many flex requests are in flight, and a few refused at random:
429 "resource unavailable"); priority (faster, dearer). Everything runs on a virtual-time loop
(`levergate.testing.VirtualTimeLoop`): the trace's hour and the overnight deadlines take
seconds, and every latency is exact.

    always-standard   no service_tier: the default tier for everything
    always-flex       service_tier flex on every request, no retries
    flex-with-retry   flex on every request; the gateway retries refusals (up to 10 attempts,
                      full-jitter backoff floored by Retry-After) within the deadline
    levergate         nothing but the deadline (`x-levergate-timeout`) and the class
                      (`x-levergate-priority`): the tier policy picks the tier, re-decides a
                      refusal, may pay priority for an interactive request

A miss is a request not answered by its deadline (the gateway's Deadline layer ends it then).
The simulator draws each request's latency from a hash of the request (`latency.per_request`),
so the latency it would get at priority, the fastest tier, is known in advance: a request that
would miss even there is one the simulator made impossible; the others' misses are avoidable.
Spend is the gateway ledger's (every request's record) and the simulator's own bill beside it.

    python benchmarks/tiers.py [--requests N] [--smoke]

writes benchmarks/results/tiers.json and .md.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import statistics
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import openai
from harness import Output, add_output_options, data_file, stamp

from levergate.app import build_gateway
from levergate.bench.traces import read_azure
from levergate.catalog import Catalog
from levergate.config import Settings
from levergate.layers.measure.record import RequestRecord
from levergate.pipeline import Deps
from levergate.policies.tiers import Tier
from levergate.server.transport import GatewayTransport
from levergate.simulator import SimSettings, run_simulator, tokens
from levergate.simulator.tiers import SimTier, request_rng, request_timing
from levergate.testing import LoopClock, run_virtual

TRACE = "azure_llm_trace_2023/AzureLLMInferenceTrace_conv.csv"
MODEL = "gpt-5-mini"  # sold at flex and priority (levergate's catalog)
SEED = 26
CONFIDENCE = 0.99
DAY = 24 * 3600.0


@dataclass(frozen=True)
class Klass:
    name: str
    share: float
    low: float  # the deadline, uniform between these many seconds
    high: float
    priority: str  # x-levergate-priority


CLASSES = (
    Klass("interactive", 0.10, 4.0, 30.0, "interactive"),
    Klass("background", 0.50, 120.0, 1800.0, "default"),
    Klass("overnight", 0.40, 2 * 3600.0, 12 * 3600.0, "batch"),
)


@dataclass(frozen=True)
class Req:
    n: int
    at: float
    text: str  # the user message
    output: int
    klass: Klass
    deadline: float  # seconds after `at`


def requests(limit: int | None, seed: int = SEED) -> list[Req]:
    """The trace's first `limit` requests (all: None), each with a seeded class and deadline."""
    rng = random.Random(seed)
    found: list[Req] = []
    for n, row in enumerate(read_azure(data_file(TRACE))):
        if limit is not None and n >= limit:
            break
        klass = rng.choices(CLASSES, weights=[k.share for k in CLASSES])[0]
        head = f"Request {n} ({klass.name}). "
        text = head + "x" * max(0, 4 * row.input_tokens - len(head))  # 4 characters a token
        found.append(Req(n, row.offset_s, text, max(1, row.output_tokens), klass,
                         rng.uniform(klass.low, klass.high)))  # fmt: skip
    return found


def sim_settings() -> SimSettings:
    """The provider: ~60 tokens/s with a right tail; flex twice as slow plus a queue wait (median
    30 s), at most 300 flex requests in flight and 2% refused anyway; priority twice as fast.
    Its prices are the catalog's for the model (its bill beside the gateway's)."""
    catalog = Catalog.builtin()
    prices = {}
    for tier, name in ((Tier.STANDARD, "default"), (Tier.FLEX, "flex"),
                       (Tier.PRIORITY, "priority")):  # fmt: skip
        rates = catalog.tier_rates(MODEL, tier, MODEL)
        if rates is None:
            raise SystemExit(f"{MODEL} has no {tier} price in the catalog")
        prices[name] = {"input": rates.input, "output": rates.output,
                        "cached_input": rates.cache_read}  # fmt: skip
    return SimSettings.model_validate({
        "port": 0, "seed": SEED, "prompt_cache": {"enabled": False},
        "latency": {"ttft_ms": 400.0, "prefill_ms_per_token": 0.2, "tokens_per_second": 60.0,
                    "jitter": 0.25, "per_request": True},
        "tiers": {"flex": {"slowdown": 2.0, "queue_ms": 30_000.0, "queue_spread": 0.8,
                           "max_concurrency": 300, "refusal_rate": 0.02},
                  "priority": {"speedup": 2.0}, "prices": {MODEL: prices}},
    })  # fmt: skip


def oracle(req: Req, sim: SimSettings, tier: SimTier) -> float:
    """The seconds the simulator takes for `req` at `tier` (its per-request draws)."""
    prompt = tokens.chat_prompt({"messages": [{"role": "user", "content": req.text}]})
    timing = request_timing(
        latency=sim.latency, tiers=sim.tiers, tier=tier,
        uncached_tokens=tokens.count_tokens(prompt), output_tokens=req.output,
        rng=request_rng(sim.seed, model=MODEL, tier=tier, prompt=prompt),
    )  # fmt: skip
    return timing.total


STRATEGIES: dict[str, tuple[str | None, dict[str, Any], dict[str, Any]]] = {
    # name: (the client's service_tier, `tiers` settings, `traffic.retry` settings)
    "always-standard": (None, {}, {"enabled": False}),
    "always-flex": ("flex", {}, {"enabled": False}),
    "flex-with-retry": ("flex", {}, {"max_attempts": 10, "budget_ratio": 10.0,
                                     "max_floor_seconds": 600.0}),
    "levergate": (None, {"enabled": True, "confidence": CONFIDENCE,
                         "default_route": {"ceiling": "priority"}}, {}),
}  # fmt: skip


def gateway_settings(sim_url: str, tiers: dict[str, Any], retry: dict[str, Any]) -> Settings:
    slow = {"connect": 10.0, "ttfb": DAY, "idle": DAY, "total": DAY}  # deadlines end requests
    return Settings.load(
        upstreams=[{"name": "sim", "base_url": sim_url, "api_key": "sk-bench", "timeouts": slow}],
        models=[{"name": MODEL, "upstream": "sim"}],
        limits={"max_timeout_seconds": DAY},
        traffic={"retry": retry, "seed": SEED},
        tiers=tiers,
    )


class Records:
    def __init__(self) -> None:
        self.seen: list[RequestRecord] = []

    def emit(self, record: RequestRecord) -> None:
        self.seen.append(record)


async def send(sdk: openai.AsyncOpenAI, req: Req, tier: str | None) -> tuple[bool, float]:
    """(answered, seconds) of one request, sent at its arrival time."""
    loop = asyncio.get_running_loop()
    await asyncio.sleep(max(0.0, req.at - loop.time()))
    started = loop.time()
    extra = {"service_tier": tier} if tier is not None else None
    headers = {"x-levergate-timeout": f"{req.deadline:.3f}", "x-request-id": f"r{req.n}",
               "x-levergate-priority": req.klass.priority}  # fmt: skip
    try:
        await sdk.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": req.text}],
            max_tokens=req.output, extra_headers=headers, extra_body=extra,
        )  # fmt: skip
    except openai.APIError:
        return False, loop.time() - started
    return True, loop.time() - started


async def run(name: str, reqs: Sequence[Req], sim: SimSettings) -> dict[str, Any]:
    tier, tiers, retry = STRATEGIES[name]
    records = Records()
    clock = LoopClock()
    async with run_simulator(sim, clock=clock) as handle:
        settings = gateway_settings(handle.base_url, tiers, retry)
        async with build_gateway(settings, deps=Deps(clock=clock, sinks=[records])) as gw:
            http = httpx.AsyncClient(transport=GatewayTransport(gw), timeout=DAY)
            async with openai.AsyncOpenAI(base_url="http://levergate/v1", api_key="x",
                                          http_client=http, max_retries=0,  # type: ignore[arg-type]
                                          timeout=DAY) as sdk:  # fmt: skip
                outcomes = await asyncio.gather(*(send(sdk, r, tier) for r in reqs))
            await asyncio.sleep(1.0)  # the last records
        bill = handle.stats()["tiers"]
    return summary(name, reqs, outcomes=outcomes, records=records.seen, bill=bill, sim=sim)


def summary(
    name: str, reqs: Sequence[Req], *, outcomes: Sequence[tuple[bool, float]],
    records: Sequence[RequestRecord], bill: dict[str, Any], sim: SimSettings,
) -> dict[str, Any]:  # fmt: skip
    missed = [
        not ok or seconds > r.deadline for r, (ok, seconds) in zip(reqs, outcomes, strict=True)
    ]
    impossible = [oracle(r, sim, SimTier.PRIORITY) > r.deadline for r in reqs]
    by_class: dict[str, dict[str, int]] = {}
    for r, miss, lost in zip(reqs, missed, impossible, strict=True):
        row = by_class.setdefault(r.klass.name, {"requests": 0, "missed": 0, "avoidable": 0})
        row["requests"] += 1
        row["missed"] += miss
        row["avoidable"] += miss and not lost
    answered = [r for r in records if r.outcome == "ok"]
    decided = [r.tier_decision for r in answered if r.tier_decision is not None]
    escalated = sum(1 for d in decided if d.refused)
    hedged = sum(1 for d in decided if d.hedged is not None)
    return {
        "strategy": name,
        "requests": len(reqs),
        "spend_usd": sum(r.cost_usd for r in records),
        "provider_bill_usd": sum(t["usd"] for t in bill.values()),
        "missed": sum(missed),
        "avoidable_missed": sum(m and not lost for m, lost in zip(missed, impossible, strict=True)),
        "impossible": sum(impossible),
        "by_class": by_class,
        "tiers": dict(Counter(r.tier for r in answered)),
        "refused_by_provider": sum(t["refused"] for t in bill.values()),
        "escalated_after_refusal": escalated,
        "hedged": hedged,
        "p50_seconds": statistics.median(s for _, s in outcomes),
    }


def table(runs: Sequence[dict[str, Any]]) -> list[str]:
    base = runs[0]["spend_usd"]
    lines = [
        (
            "| strategy | spend $ | vs always-standard | provider's bill $ | missed | avoidable "
            "| interactive missed | background missed | overnight missed | tiers served "
            "| refused | re-decided | hedged |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        c = run["by_class"]
        served = ", ".join(f"{k} {v}" for k, v in sorted(run["tiers"].items()))
        change = (run["spend_usd"] / base - 1.0) if base else 0.0
        lines.append(
            f"| {run['strategy']} | {run['spend_usd']:.4f} | {change:+.1%} | "
            f"{run['provider_bill_usd']:.4f} | {run['missed']} | {run['avoidable_missed']} | "
            + " | ".join(f"{c.get(k, {}).get('missed', 0)}" for k in
                         ("interactive", "background", "overnight"))
            + f" | {served} | {run['refused_by_provider']} | {run['escalated_after_refusal']} | "
            f"{run['hedged']} |"
        )  # fmt: skip
    return lines


def report(runs: Sequence[dict[str, Any]], reqs: Sequence[Req], when: dict[str, str],
           wall: float) -> str:  # fmt: skip
    mix = Counter(r.klass.name for r in reqs)
    classes = "; ".join(
        f"{k.name} {mix[k.name]} ({k.share:.0%}): deadline {k.low:g}-{k.high:g} s" for k in CLASSES
    )
    ours = next(r for r in runs if r["strategy"] == "levergate")
    saved = 1.0 - ours["spend_usd"] / runs[0]["spend_usd"] if runs[0]["spend_usd"] else 0.0
    bill = runs[0]["provider_bill_usd"]
    billed = 1.0 - ours["provider_bill_usd"] / bill if bill else 0.0
    lines = [
        "# Service tiers chosen by the deadline (issue 26)",
        "",
        (
            f"{when['date']}, {when['machine']} (shared with other work; virtual time, so the "
            f"numbers do not depend on the load: {wall:.0f} s of wall time for all four runs). "
            f"The Azure LLM inference trace 2023 (conversation), its first {len(reqs)} "
            f"requests: arrival times, prompt and output tokens as recorded. Seeded classes: "
            f"{classes}. Model {MODEL} at the catalog's prices; policy confidence "
            f"{CONFIDENCE}, route ceiling priority. The simulator: ~60 tokens/s after a 0.4 s "
            "first token (log-normal jitter 0.25); flex 2x slower plus a queue wait (median "
            "30 s), refused past 300 flex requests in flight and 2% at random; priority 2x "
            "faster."
        ),
        "",
        (
            f"**levergate: {saved:.1%} below always-standard by the ledger "
            f"({billed:.1%} by the provider's bill), {ours['avoidable_missed']} avoidable "
            f"deadline misses** ({ours['impossible']} requests were impossible: they would miss "
            "their deadline even at priority, the fastest tier)."
        ),
        "",
        *table(runs),
        "",
        (
            "Spend is what the gateway's ledger priced from each answer's own `service_tier`; "
            "the provider's bill is the simulator's count at the same prices: it also bills "
            "what was generated for nobody (a request cut at its deadline, the losing attempt "
            "of a hedge), but not a refusal. `re-decided`: answers that came after the provider "
            "refused flex for them; `hedged`: requests whose slow attempt had not answered by "
            "the latest moment the faster tier could still meet the deadline, so that tier was "
            "asked beside it (the first answer won, the other was cancelled)."
        ),
        "",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=None,
                        help="the trace's first N requests (default: all)")  # fmt: skip
    add_output_options(parser)
    args = parser.parse_args(argv)
    out = Output.of(args)
    # Every request cut at its deadline and every unique prompt would be a log line.
    logging.getLogger("levergate").setLevel(logging.ERROR)
    reqs = requests(150 if args.smoke else args.requests)
    sim = sim_settings()
    when = stamp()
    wall = time.monotonic()
    runs = [run_virtual(run(name, reqs, sim)) for name in STRATEGIES]
    wall = time.monotonic() - wall
    out.write("tiers", {**when, "requests": len(reqs), "confidence": CONFIDENCE,
                        "classes": [k.__dict__ for k in CLASSES], "runs": runs},
              report(runs, reqs, when, wall))  # fmt: skip


if __name__ == "__main__":
    main()
