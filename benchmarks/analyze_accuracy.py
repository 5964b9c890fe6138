"""Does `levergate analyze` predict what a lever really does (issue 25 §3)? For each lever: a
baseline run of a public workload through the real gateway with the lever off, the request log
it wrote analysed with the lever on, then the same workload run live with the lever on; the
predicted spend and savings are compared with the measured ones (goal: within 10%), and the
predicted direction of the latency change with the measured one.

Everything runs in-process, in real time (the log's timings are what the analysis fits its
latency model to, and the gateway measures them on the real clock), with the traces' arrival
times compressed `SCALE` times and a fast simulator: the official OpenAI SDK through
levergate's whole pipeline (an httpx transport) to the simulator over loopback. The request
log's rows are built as its writer builds them (the replay features of each call, `row_of`,
bodies off but for the levers that need them) and written to SQLite. Spend is the gateway's
ledger (each record's `cost_usd`, the catalog's prices).

    exact      ShareGPT first prompts, each asked again at Zipf-like popularity (a third of the
               requests are new questions), temperature 0; Azure LLM trace 2023 (conversation)
               arrival times and answer lengths. Off: `cache.enabled: false`; on: the default
               exact cache (and coalescing).
    affinity   The Mooncake conversation trace: its arrival times and sizes, prompts rebuilt
               from its 512-token prefix blocks (bench/workload.py); one model over two
               endpoints of the simulator with keys of their own (each key its own provider
               prompt cache). Off: `balance: round_robin`; on: `balance: affinity`.
    semantic, route, trim   the levers that need bodies: analyze_workloads.py (QQP pairs,
               RouteLLM's MMLU questions under a router trained in the run, HH-RLHF dialogues).

Not measured here yet: deferral (a deferred request answers through the provider batch API's
polling, not modelled on this loop), automatic breakpoints (needs an Anthropic upstream), and
cascades (their checks are replayed over logged answers; no live rig here).

    python benchmarks/analyze_accuracy.py [--requests 400] [--smoke]

Writes benchmarks/results/analyze_accuracy.{json,md}.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import random
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import analyze_workloads as workloads
import httpx
import openai
import orjson
from analyze_workloads import BODY_RATES, measured_rate
from harness import Output, add_output_options, data_file, stamp

from levergate.analyze.analysis import analyse
from levergate.analyze.inputs import Skipped, from_records
from levergate.analyze.plan import plan_of
from levergate.app import build_gateway
from levergate.bench.traces import read_azure, read_mooncake
from levergate.bench.workload import PromptFactory
from levergate.config import Settings
from levergate.core.call import Call
from levergate.layers.measure.record import RequestRecord
from levergate.pipeline import Deps
from levergate.requestlog.features import features
from levergate.requestlog.query import LogFilter, decode_cursor
from levergate.requestlog.row import row_of
from levergate.requestlog.store import SqliteLog
from levergate.server.transport import GatewayTransport
from levergate.simulator import SimSettings, run_simulator
from levergate.testing import LoopClock

MODEL = "gpt-4o-mini"
SEED = 25
DAY = 86400.0
GOAL = 0.10
SCALE = 0.1  # the traces' arrival times, compressed


@dataclass(frozen=True)
class Req:
    at: float
    text: str
    max_tokens: int
    model: str = MODEL
    messages: tuple[dict[str, str], ...] | None = None  # a conversation instead of `text`


def exact_requests(count: int) -> list[Req]:
    """ShareGPT questions asked again at Zipf-like popularity, on the Azure trace's clock."""
    rng = random.Random(SEED)
    prompts = [orjson.loads(line)["prompt"][:4000] for line in
               data_file("sharegpt_prompts/sharegpt_first_prompts.jsonl").read_bytes().splitlines()
               [: max(1, count // 3)]]  # fmt: skip
    weights = [1.0 / (k + 1) for k in range(len(prompts))]
    trace = read_azure(data_file("azure_llm_trace_2023/AzureLLMInferenceTrace_conv.csv"))
    found = []
    for n, row in zip(range(count), trace, strict=False):
        pick = n if n < len(prompts) else rng.choices(range(len(prompts)), weights)[0]
        found.append(Req(row.offset_s, prompts[pick], max(1, min(row.output_tokens, 400))))
    found.sort(key=lambda r: r.at)
    return found


def affinity_requests(count: int) -> list[Req]:
    """The Mooncake trace's first requests, prompts rebuilt from their prefix blocks."""
    trace = read_mooncake(data_file("mooncake_traces/conversation_trace.jsonl"))
    words = PromptFactory(seed=SEED, nonce="lg")
    return [Req(r.offset_s, words.blocks(index=n, tokens=min(r.input_tokens, 12_000),
                                         hash_ids=r.hash_ids), max(1, min(r.output_tokens, 200)))
            for n, r in zip(range(count), trace, strict=False)]  # fmt: skip


def sim_settings() -> SimSettings:
    return SimSettings.model_validate({
        "port": 0, "seed": SEED,
        "latency": {"ttft_ms": 50.0, "prefill_ms_per_token": 0.1, "tokens_per_second": 400.0,
                    "jitter": 0.1, "per_request": True},
    })  # fmt: skip


def exact_settings(url: str, *, on: bool) -> Settings:
    return Settings.load(upstreams=[{"name": "sim", "base_url": url, "api_key": "sk-a"}],
                         models=[{"name": MODEL, "upstream": "sim"}],
                         cache={"enabled": on}, limits={"max_timeout_seconds": DAY})  # fmt: skip


def affinity_settings(url: str, *, on: bool) -> Settings:
    ups = [{"name": f"key{i}", "base_url": url, "api_key": f"sk-key-{i}"} for i in range(2)]
    model = {"name": MODEL, "endpoints": [{"upstream": u["name"]} for u in ups],
             "balance": "affinity" if on else "round_robin"}  # fmt: skip
    return Settings.load(upstreams=ups, models=[model], cache={"enabled": False},
                         limits={"max_timeout_seconds": DAY})  # fmt: skip


class Records:
    def __init__(self) -> None:
        self.seen: list[RequestRecord] = []

    def emit(self, record: RequestRecord) -> None:
        self.seen.append(record)


class LogRows:
    """The request log's rows as its writer builds them (the replay features of each call,
    requestlog/features.py, and `row_of`), kept in memory and written to the store at the end
    so that the store's writes do not share the two cores with the run."""

    def __init__(self, clock: LoopClock, *, bodies: bool = False) -> None:
        self.clock = clock
        self.bodies = bodies  # the request bodies logged too (the levers that need them)
        self.rows: list[tuple[Any, ...]] = []

    def observe(self, record: RequestRecord, call: Call, seen: object) -> None:
        del seen
        now = self.clock.now()
        replay = features(call, now=now, wall=now, total=record.timings.total)
        body = orjson.dumps(call.body).decode() if self.bodies else None
        self.rows.append(row_of(now, record, (body, None), replay))


async def send(sdk: openai.AsyncOpenAI, req: Req) -> None:
    loop = asyncio.get_running_loop()
    await asyncio.sleep(max(0.0, req.at - loop.time()))  # `at`: on the loop's clock
    messages = list(req.messages or ({"role": "user", "content": req.text},))
    with contextlib.suppress(openai.BadRequestError):  # trimming refuses a prompt too long
        await sdk.chat.completions.create(
            model=req.model, temperature=0, max_tokens=req.max_tokens,
            messages=messages,  # type: ignore[arg-type]
        )  # fmt: skip


async def live(
    build: Callable[[str], Settings], reqs: Sequence[Req], db: Path, *, bodies: bool = False
) -> list[RequestRecord]:
    """One run: the records, and the request log written to `db`."""
    records, clock = Records(), LoopClock()
    log = LogRows(clock, bodies=bodies)
    async with (
        run_simulator(sim_settings(), clock=clock) as handle,
        build_gateway(build(handle.base_url), deps=Deps(clock=clock, sinks=[records])) as gw,
    ):
        gw.recorder.observe(log)
        start = clock.now() + 0.1
        timed = [replace(r, at=start + r.at * SCALE) for r in reqs]
        http = httpx.AsyncClient(transport=GatewayTransport(gw), timeout=DAY)
        async with openai.AsyncOpenAI(base_url="http://levergate/v1", api_key="x",
                                      http_client=http, max_retries=0,  # type: ignore[arg-type]
                                      timeout=DAY) as sdk:  # fmt: skip
            await asyncio.gather(*(send(sdk, r) for r in timed))
        await asyncio.sleep(1.0)  # the last records
    store = SqliteLog(str(db), timeout_seconds=30)
    store.write(log.rows)
    store.close()
    return records.seen


def logged(db: Path) -> list[tuple[str, dict[str, Any]]]:
    store = SqliteLog(str(db), timeout_seconds=30)
    found, cursor = [], None
    try:
        while True:
            page = store.page(LogFilter(), cursor=cursor, limit=1000)
            found += [(f"record {r['seq']}", r) for r in page.records]
            if page.next_cursor is None:
                return found
            cursor = decode_cursor(page.next_cursor)
    finally:
        store.close()


def mean(records: Sequence[RequestRecord]) -> float:
    return statistics.fmean(r.timings.total for r in records) * 1000.0


def lever_run(
    name: str, build: Callable[..., Settings], reqs: Sequence[Req], folder: Path,
    *, bodies: bool = False,
) -> dict[str, Any]:  # fmt: skip
    """Baseline, analysis, live: the comparison for one lever (`bodies`: logged)."""
    off = asyncio.run(live(lambda url: build(url, on=False), reqs, folder / f"{name}-off.db",
                           bodies=bodies))  # fmt: skip
    on = asyncio.run(live(lambda url: build(url, on=True), reqs, folder / f"{name}-on.db"))
    given = from_records(logged(folder / f"{name}-off.db"), source=name, skipped=Skipped())
    url = "http://127.0.0.1:1/v1"
    result = analyse(given, baseline=plan_of(build(url, on=False)),
                     candidate=plan_of(build(url, on=True)))  # fmt: skip
    row = next(r for r in result["levers"] if r["lever"] == name)
    spent_off, spent_on = sum(r.cost_usd for r in off), sum(r.cost_usd for r in on)
    predicted_saving = result["baseline"]["cost_usd"] - row["cost_usd"]
    measured_change = mean(on) - mean(off)
    return {
        "lever": name, "requests": len(reqs), "logged": len(given.requests),
        "baseline_usd": spent_off, "replayed_baseline_usd": result["baseline"]["cost_usd"],
        "measured_usd": spent_on, "predicted_usd": row["cost_usd"],
        "spend_error": row["cost_usd"] / spent_on - 1.0 if spent_on else 0.0,
        "measured_saving_usd": spent_off - spent_on, "predicted_saving_usd": predicted_saving,
        "saving_error": (predicted_saving / (spent_off - spent_on) - 1.0
                         if spent_off != spent_on else 0.0),
        "predicted_mean_change_ms": row["total_mean_change_ms"],
        "measured_mean_change_ms": measured_change,
        "latency_direction_right": (row["total_mean_change_ms"] or 0.0) * measured_change > 0
        or (row["total_mean_change_ms"] or 0.0) == measured_change == 0,
        "predicted_hit_rate": row["hit_rate"], "caveat": row.get("caveat"),
        **({"measured_hit_rate": measured_rate(name, on)} if name in BODY_RATES else {}),
    }  # fmt: skip


RATE_OF = {"semantic": "semantic-cache hits", "route": "sent to gpt-4o-mini",
           "trim": "prompt tokens trimmed"}  # fmt: skip


def body_runs(count: int, folder: Path, *, smoke: bool) -> list[dict[str, Any]]:
    """The levers that need bodies (analyze_workloads.py), bodies logged in the baseline."""
    router = workloads.router_file(folder, rows=80 if smoke else workloads.TRAIN_ROWS)
    return [
        lever_run("semantic", workloads.semantic_settings,
                  workloads.semantic_requests(count, Req), folder, bodies=True),
        lever_run("route", partial(workloads.route_settings, router=router),
                  workloads.route_requests(count, Req), folder, bodies=True),
        lever_run("trim", workloads.trim_settings, workloads.trim_requests(count, Req), folder,
                  bodies=True),
    ]  # fmt: skip


def report(runs: Sequence[dict[str, Any]], when: dict[str, str], wall: float) -> str:
    lines = [
        "# `levergate analyze`: predicted against measured (issue 25 §3)",
        "",
        (f"{when['date']}, {when['machine']} ({wall:.0f} s of wall time). Each "
         f"lever: the workload (arrivals compressed x{SCALE:g}) through the gateway with the "
         "lever off (the request log written, bodies off but for the semantic cache, routing "
         "and trimming), `analyze` with it on, then live "
         "with it on. Spend is the gateway's ledger; the goal is within 10%."),
        "",
        ("| lever | requests | baseline $ | predicted $ | measured $ | spend error | predicted "
         "saving $ | measured saving $ | saving error | mean latency change, predicted / "
         "measured ms | direction |"),
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for r in runs:
        ok = abs(r["spend_error"]) <= GOAL and abs(r["saving_error"]) <= GOAL
        lines.append(
            f"| {r['lever']} | {r['requests']} | {r['baseline_usd']:.5f} | "
            f"{r['predicted_usd']:.5f} | {r['measured_usd']:.5f} | {r['spend_error']:+.1%} | "
            f"{r['predicted_saving_usd']:.5f} | {r['measured_saving_usd']:.5f} | "
            f"{r['saving_error']:+.1%}{'' if ok else ' (outside 10%)'} | "
            f"{r['predicted_mean_change_ms'] or 0:+.0f} / {r['measured_mean_change_ms']:+.0f} | "
            f"{'right' if r['latency_direction_right'] else 'WRONG'} |"
        )  # fmt: skip
    bodies = [r for r in runs if "measured_hit_rate" in r]
    if bodies:
        lines += ["", ("The levers that need bodies (request bodies logged in the baseline run): "
                  "the rate each predicts against the live run's, and its measured quality "
                  "caveat."), "", "| lever | rate | predicted | measured | quality caveat |",
                  "|---|---|---|---|---|"]  # fmt: skip
        lines += [f"| {r['lever']} | {RATE_OF[r['lever']]} | {r['predicted_hit_rate']:.1%} | "
                  f"{r['measured_hit_rate']:.1%} | {r['caveat']} |" for r in bodies]  # fmt: skip
    lines += ["", (
        "Not measured yet: deferral to batch APIs (answered through the provider batch API's "
        "polling), automatic breakpoints (an Anthropic upstream), prompt_cache_key (not "
        "modelled) and cascades (replayed by `analyze`, not run live here)."), ""]  # fmt: skip
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=400)
    add_output_options(parser)
    args = parser.parse_args(argv)
    out = Output.of(args)
    logging.getLogger("levergate").setLevel(logging.ERROR)
    count = 60 if args.smoke else args.requests
    when = stamp()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="analyze-accuracy-") as folder:
        runs = [
            lever_run("exact", exact_settings, exact_requests(count), Path(folder)),
            lever_run("affinity", affinity_settings, affinity_requests(count), Path(folder)),
        ]
        runs += body_runs(12 if args.smoke else count, Path(folder), smoke=args.smoke)
    wall = time.monotonic() - started
    out.write("analyze_accuracy", {**when, "runs": runs, "goal": GOAL},
              report(runs, when, wall))  # fmt: skip


if __name__ == "__main__":
    main()
