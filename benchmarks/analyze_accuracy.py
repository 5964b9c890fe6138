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
    prompt_cache_key  The Mooncake conversation trace again, each conversation a tenant (its
               first block of its own), on one simulator key whose provider model routes by
               prefix and key over 16 cache machines (simulator/cache_routing.py; every
               conversation starts with the trace's one shared block). Off: no key; on:
               `prompt_cache.openai_cache_key: on` (the gateway's key: tenant and prefix).
               The analysis is given the simulator's provider model.
    breakpoints  The Mooncake conversation trace through an Anthropic upstream (the
               simulator's Messages API) as `claude-sonnet-4-5`: each prompt's text split into
               content parts where it stops sharing its prefix with another request of the
               trace (a conversation's earlier turns). Off: `prompt_cache.breakpoints.enabled:
               false`; on: the gateway's automatic breakpoints.
    defer      Alpaca-eval instructions as one Batch API batch. Off: the gateway's batch
               runner answers each line; on: `defer` with a route policy for the alias, the
               batch goes to the simulator's batch API (its turnaround shortened to
               `TURNAROUND` seconds: a 5-minute provider batch, compressed as the arrivals
               are; providers promise 24 hours). Latency: the batch's wall time, created to
               completed; the analysis predicts its direction only (deferred answers leave
               the percentiles: slower, within the batch window).

Not measured here: cascades (their checks are replayed over logged answers; no live rig here).

    python benchmarks/analyze_accuracy.py [--requests 400] [--levers exact,defer] [--smoke]

Writes benchmarks/results/analyze_accuracy.{json,md}.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
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
SETTLE = 1.0  # seconds at most for the last records after the last answer
CLAUDE = "claude-sonnet-4-5"
MACHINES = 16  # the simulator's cache machines in the prompt_cache_key run
TURNAROUND = 30.0  # seconds the simulator's provider batch takes (0.5 with --smoke)
LEVERS = ("exact", "affinity", "prompt_cache_key", "breakpoints", "defer", "semantic", "route",
          "trim")  # fmt: skip


@dataclass(frozen=True)
class Req:
    at: float
    text: str | list[str]  # several: content parts
    max_tokens: int
    model: str = MODEL
    messages: tuple[dict[str, str], ...] | None = None  # a conversation instead of `text`
    tenant: str = ""


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


def key_requests(count: int) -> list[Req]:
    """`affinity_requests`, each conversation (its second block) a tenant."""
    trace = read_mooncake(data_file("mooncake_traces/conversation_trace.jsonl"))
    found = []
    for row, r in zip(trace, affinity_requests(count), strict=False):
        conversation = row.hash_ids[1] if len(row.hash_ids) > 1 else 0
        found.append(Req(r.at, r.text, r.max_tokens, tenant=f"c{conversation}"))
    return found


def breakpoint_requests(count: int) -> list[Req]:
    """The Mooncake trace's first requests, each prompt's blocks split into content parts where
    its prefix stops being shared with another of these requests (of at least 2 blocks)."""
    trace = [r for _, r in zip(range(count), read_mooncake(
        data_file("mooncake_traces/conversation_trace.jsonl")), strict=False)]  # fmt: skip
    words = PromptFactory(seed=SEED, nonce="lg")
    found = []
    for n, r in enumerate(trace):
        ids = r.hash_ids
        cuts = sorted({_common(ids, o.hash_ids) for o in trace if o is not r} - {0, 1}
                      - {len(ids)})  # fmt: skip
        parts, start = [], 0
        for cut in [*cuts, len(ids)]:
            part = ids[start:cut]
            if cut < len(ids):  # a whole shared stretch: whole blocks, no nonce
                text = words.blocks(index=n, tokens=len(part) * 512 + 4, hash_ids=part)
                parts.append(text.rsplit(" ", 1)[0])
            else:
                tokens = min(r.input_tokens, 12_000) - start * 512
                parts.append(words.blocks(index=n, tokens=max(8, tokens), hash_ids=part))
            start = cut
        found.append(Req(r.offset_s, parts, max(1, min(r.output_tokens, 200)), model=CLAUDE))
    return found


def _common(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def defer_requests(count: int) -> list[Req]:
    """Alpaca-eval instructions, as one batch's lines."""
    lines = data_file("alpaca_eval/prompts.jsonl").read_bytes().splitlines()[:count]
    return [Req(0.0, orjson.loads(line)["instruction"], 200) for line in lines]


LATENCY = {"ttft_ms": 50.0, "prefill_ms_per_token": 0.1, "tokens_per_second": 400.0,
           "jitter": 0.1, "per_request": True}  # fmt: skip


@dataclass(frozen=True)
class Pace:
    """How fast the live runs go: the traces' arrival times compressed `scale` times, and the
    simulator's latency (a fast provider, yet slow enough for the latency model to fit)."""

    scale: float = SCALE
    latency: tuple[tuple[str, Any], ...] = tuple(LATENCY.items())


# A smoke run's: its few requests ten times closer, and answers ten times quicker.
SMOKE_PACE = Pace(scale=SCALE / 10, latency=tuple({
    **LATENCY, "ttft_ms": 5.0, "prefill_ms_per_token": 0.01, "tokens_per_second": 4000.0,
}.items()))  # fmt: skip


def sim_settings(pace: Pace = Pace(), **over: Any) -> SimSettings:
    return SimSettings.model_validate({
        "port": 0, "seed": SEED, "latency": dict(pace.latency), **over,
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


def key_settings(url: str, *, on: bool) -> Settings:
    return Settings.load(upstreams=[{"name": "sim", "base_url": url, "api_key": "sk-a"}],
                         models=[{"name": MODEL, "upstream": "sim"}], cache={"enabled": False},
                         prompt_cache={"openai_cache_key": "on" if on else "off"},
                         limits={"max_timeout_seconds": DAY})  # fmt: skip


def breakpoint_settings(url: str, *, on: bool) -> Settings:
    root = url.removesuffix("/v1")
    return Settings.load(
        upstreams=[{"name": "ant", "kind": "anthropic", "base_url": root,
                    "api_key": "sk-ant-simulated"}],
        models=[{"name": CLAUDE, "upstream": "ant"}], cache={"enabled": False},
        prompt_cache={"breakpoints": {"enabled": on}}, limits={"max_timeout_seconds": DAY},
    )  # fmt: skip


def defer_settings(url: str, *, on: bool, folder: Path) -> Settings:
    return Settings.load(
        upstreams=[{"name": "sim", "base_url": url, "api_key": "sk-a"}],
        models=[{"name": MODEL, "upstream": "sim"}], cache={"enabled": False},
        batch={"enabled": True, "dir": str(folder / "files"), "poll_seconds": 0.05,
               "store": {"sqlite_path": str(folder / "batch.sqlite3")}},
        defer={"enabled": on, "routes": {MODEL: {}}, "poll_first_seconds": 0.2,
               "poll_max_seconds": 0.5, "pack_max_wait_seconds": 0},
        limits={"max_timeout_seconds": DAY},
    )  # fmt: skip


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


def content(req: Req) -> Any:
    if isinstance(req.text, str):
        return req.text
    return [{"type": "text", "text": part} for part in req.text]


def messages_of(req: Req) -> list[Any]:
    return list(req.messages or ({"role": "user", "content": content(req)},))


async def send(sdk: openai.AsyncOpenAI, req: Req) -> None:
    loop = asyncio.get_running_loop()
    await asyncio.sleep(max(0.0, req.at - loop.time()))  # `at`: on the loop's clock
    with contextlib.suppress(openai.BadRequestError):  # trimming refuses a prompt too long
        await sdk.chat.completions.create(
            model=req.model, temperature=0, max_tokens=req.max_tokens,
            messages=messages_of(req),
            extra_headers={"x-levergate-tenant": req.tenant} if req.tenant else None,
        )  # fmt: skip


async def live(
    build: Callable[[str], Settings],
    reqs: Sequence[Req],
    db: Path,
    *,
    batch: bool = False,
    sim: dict[str, Any] | None = None,
    bodies: bool = False,
    pace: Pace = Pace(),
) -> tuple[list[RequestRecord], float | None]:
    """One run: the records and, for a batch, its wall time; the request log written to
    `db` (`bodies`: with the request bodies)."""
    records, clock = Records(), LoopClock()
    log = LogRows(clock, bodies=bodies)
    wall = None
    async with (
        run_simulator(sim_settings(pace, **(sim or {})), clock=clock) as handle,
        build_gateway(build(handle.base_url), deps=Deps(clock=clock, sinks=[records])) as gw,
    ):
        gw.recorder.observe(log)
        start = clock.now() + 0.1
        timed = [replace(r, at=start + r.at * pace.scale) for r in reqs]
        http = httpx.AsyncClient(transport=GatewayTransport(gw), timeout=DAY)
        async with openai.AsyncOpenAI(base_url="http://levergate/v1", api_key="x",
                                      http_client=http, max_retries=0,  # type: ignore[arg-type]
                                      timeout=DAY) as sdk:  # fmt: skip
            if batch:
                wall = await run_batch(sdk, reqs)
            else:
                await asyncio.gather(*(send(sdk, r) for r in timed))
        for _ in range(round(SETTLE / 0.02)):  # the last records: one a request
            if len(records.seen) >= len(reqs) and len(log.rows) >= len(reqs):
                break
            await asyncio.sleep(0.02)
    store = SqliteLog(str(db), timeout_seconds=30)
    store.write(log.rows)
    store.close()
    return records.seen, wall


async def run_batch(sdk: openai.AsyncOpenAI, reqs: Sequence[Req]) -> float:
    """`reqs` as one Batch API batch, to its end: seconds from created to completed."""
    lines = b"".join(orjson.dumps({
        "custom_id": f"r{n}", "method": "POST", "url": "/v1/chat/completions",
        "body": {"model": r.model, "max_tokens": r.max_tokens, "temperature": 0,
                 "messages": messages_of(r)},
    }) + b"\n" for n, r in enumerate(reqs))  # fmt: skip
    uploaded = await sdk.files.create(file=("in.jsonl", lines), purpose="batch")
    started = time.monotonic()
    batch = await sdk.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                     completion_window="24h")  # fmt: skip
    while batch.status not in ("completed", "failed", "expired", "cancelled"):
        await asyncio.sleep(0.1)
        batch = await sdk.batches.retrieve(batch.id)
    if batch.status != "completed":
        raise RuntimeError(f"the batch ended {batch.status}")
    return time.monotonic() - started


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


@dataclass(frozen=True)
class Lever:
    name: str
    build: Callable[..., Settings]
    reqs: Callable[[int], list[Req]]
    batch: bool = False
    sim: tuple[tuple[str, Any], ...] = ()  # the simulator's settings for this lever
    bodies: bool = False  # the baseline's log keeps the request bodies (the levers needing them)


def lever_run(lever: Lever, count: int, folder: Path, rounds: int = 1, *,
              pace: Pace = Pace()) -> dict[str, Any]:  # fmt: skip
    """Baseline, analysis, live: the comparison for one lever. The live runs alternate off and
    on `rounds` times: spend and the analysis from the first pair, the latency change the
    median of the pairs' (the machine is shared: one pair's latency moves with its load)."""
    name, reqs = lever.name, lever.reqs(count)
    sim = dict(lever.sim)

    def build(url: str, *, on: bool) -> Settings:
        if lever.batch:
            return lever.build(url, on=on, folder=folder / f"{name}-{on}")
        return lever.build(url, on=on)

    loads: list[float] = []

    def run(*, on: bool, n: int) -> tuple[list[RequestRecord], float | None]:
        loads.append(os.getloadavg()[0])
        return asyncio.run(live(lambda url: build(url, on=on), reqs,
                                folder / f"{name}-{'on' if on else 'off'}-{n}.db",
                                batch=lever.batch, sim=sim, bodies=lever.bodies and not on,
                                pace=pace))  # fmt: skip

    pairs = [(run(on=False, n=n), run(on=True, n=n)) for n in range(rounds)]
    (off, _), (on, _) = pairs[0]
    given = from_records(logged(folder / f"{name}-off-0.db"), source=name, skipped=Skipped())
    url = "http://127.0.0.1:1/v1"
    result = analyse(given, baseline=plan_of(build(url, on=False)),
                     candidate=plan_of(build(url, on=True)),
                     provider=sim_settings(pace, **sim).prompt_cache)  # fmt: skip
    row = next(r for r in result["levers"] if r["lever"] == name)
    if not row["evaluable"]:
        raise RuntimeError(f"{name}: not evaluable: {row['reason']}")
    spent_off, spent_on = sum(r.cost_usd for r in off), sum(r.cost_usd for r in on)
    predicted_saving = result["baseline"]["cost_usd"] - row["cost_usd"]
    if lever.batch:  # deferred answers leave the percentiles: slower, within the batch window
        predicted_change = 1.0 if row["hit_rate"] > 0 else 0.0
        changes = [((b or 0.0) - (a or 0.0)) * 1000.0 for (_, a), (_, b) in pairs]
    else:
        predicted_change = row["total_mean_change_ms"] or 0.0
        changes = [mean(b) - mean(a) for (a, _), (b, _) in pairs]
    measured_change = statistics.median(changes)
    return {
        "lever": name, "requests": len(reqs), "logged": len(given.requests),
        "baseline_usd": spent_off, "replayed_baseline_usd": result["baseline"]["cost_usd"],
        "measured_usd": spent_on, "predicted_usd": row["cost_usd"],
        "spend_error": row["cost_usd"] / spent_on - 1.0 if spent_on else 0.0,
        "measured_saving_usd": spent_off - spent_on, "predicted_saving_usd": predicted_saving,
        "saving_error": (predicted_saving / (spent_off - spent_on) - 1.0
                         if spent_off != spent_on else 0.0),
        "predicted_mean_change_ms": None if lever.batch else predicted_change,
        "measured_mean_change_ms": measured_change,
        "latency": "batch wall time" if lever.batch else "mean per request",
        "latency_direction_right": predicted_change * measured_change > 0
        or predicted_change == measured_change == 0,
        "predicted_hit_rate": row["hit_rate"], "measured_changes_ms": changes,
        "caveat": row.get("caveat"),
        **({"measured_hit_rate": measured_rate(name, on)} if name in BODY_RATES else {}),
        "load_average": [min(loads), max(loads)],
        "measured": _measured(on),
    }  # fmt: skip


def _measured(records: Sequence[RequestRecord]) -> dict[str, Any]:
    """What the live run's records say the lever did (cached / written prompt tokens,
    batched requests)."""
    trace = [r.tokens for r in records]
    return {
        "prompt_tokens": sum(t.input for t in trace),
        "cached_tokens": sum(t.cached_read for t in trace),
        "written_tokens": sum(t.cache_write for t in trace),
        "batched": sum(1 for r in records if r.tier == "batch"),
    }


def report(runs: Sequence[dict[str, Any]], when: dict[str, str], wall: float, turnaround: float,
           scale: float) -> str:  # fmt: skip
    lines = [
        "# `levergate analyze`: predicted against measured (issue 25 §3)",
        "",
        (f"{when['date']}, {when['machine']} ({wall:.0f} s of wall time). Each "
         f"lever: the workload (arrivals compressed x{scale:g}) through the gateway with the "
         "lever off (the request log written, bodies off but for the semantic cache, routing "
         "and trimming), `analyze` with it on, then live "
         "with it on. Spend is the gateway's ledger; the goal is within 10%."),
        "",
        ("| lever | requests | baseline $ | predicted $ | measured $ | spend error | predicted "
         "saving $ | measured saving $ | saving error | mean latency change, predicted / "
         "measured ms (each pair's) | direction | load average |"),
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for r in runs:
        ok = abs(r["spend_error"]) <= GOAL and abs(r["saving_error"]) <= GOAL
        predicted = ("slower" if r["predicted_mean_change_ms"] is None
                     else f"{r['predicted_mean_change_ms']:+.0f}")  # fmt: skip
        lines.append(
            f"| {r['lever']} | {r['requests']} | {r['baseline_usd']:.5f} | "
            f"{r['predicted_usd']:.5f} | {r['measured_usd']:.5f} | {r['spend_error']:+.1%} | "
            f"{r['predicted_saving_usd']:.5f} | {r['measured_saving_usd']:.5f} | "
            f"{r['saving_error']:+.1%}{'' if ok else ' (outside 10%)'} | "
            f"{predicted} / {r['measured_mean_change_ms']:+.0f} "
            f"({', '.join(f'{c:+.0f}' for c in r['measured_changes_ms'])}){_how(r)} | "
            f"{'right' if r['latency_direction_right'] else 'WRONG'} | "
            f"{r['load_average'][0]:.1f} to {r['load_average'][1]:.1f} |"
        )  # fmt: skip
    lines += [
        "",
        "What the live runs' records say each lever did (with the lever on):",
        "",
        "| lever | prompt tokens | cached | written | batched requests |",
        "|---|---|---|---|---|",
    ]
    lines += [f"| {r['lever']} | {m['prompt_tokens']:,} | {m['cached_tokens']:,} | "
              f"{m['written_tokens']:,} | {m['batched']:,} |"
              for r in runs for m in [r["measured"]]]  # fmt: skip
    bodies = [r for r in runs if "measured_hit_rate" in r]
    if bodies:
        lines += ["", ("The levers that need bodies (request bodies logged in the baseline run): "
                  "the rate each predicts against the live run's, and its measured quality "
                  "caveat."), "", "| lever | rate | predicted | measured | quality caveat |",
                  "|---|---|---|---|---|"]  # fmt: skip
        lines += [f"| {r['lever']} | {RATE_OF[r['lever']]} | {r['predicted_hit_rate']:.1%} | "
                  f"{r['measured_hit_rate']:.1%} | {r['caveat']} |" for r in bodies]  # fmt: skip
    lines += ["", (
        f"prompt_cache_key: the simulator routes by prefix and key over {MACHINES} cache "
        "machines, and the analysis is given that provider model (`--provider-machines`). "
        "The measured latency change is the median over the live off/on pairs (each pair's in "
        "brackets). "
        f"Deferral: the simulator's batches end {turnaround:g} s after creation; its latency "
        "is the batch's wall time, created to completed, and the prediction is its direction "
        "only (deferred answers leave the percentiles). Not measured: cascades (replayed by "
        "`analyze`, not run live here)."), ""]  # fmt: skip
    return "\n".join(lines)


RATE_OF = {"semantic": "semantic-cache hits", "route": "sent to gpt-4o-mini",
           "trim": "prompt tokens trimmed"}  # fmt: skip


def _how(r: dict[str, Any]) -> str:
    return " (batch wall time)" if r["latency"] == "batch wall time" else ""


def lever_runs(turnaround: float, router: Callable[[], Path]) -> dict[str, Lever]:
    """Every lever's run; `router`: the route lever's router file (trained when asked)."""

    def route_settings(url: str, *, on: bool) -> Settings:
        return workloads.route_settings(url, on=on, router=router())

    return {
        "exact": Lever("exact", exact_settings, exact_requests),
        "affinity": Lever("affinity", affinity_settings, affinity_requests),
        "prompt_cache_key": Lever("prompt_cache_key", key_settings, key_requests,
                                  sim=(("prompt_cache", {"machines": MACHINES}),)),
        "breakpoints": Lever("breakpoints", breakpoint_settings, breakpoint_requests),
        "defer": Lever("defer", defer_settings, defer_requests, batch=True,
                       sim=(("batch_api", {"turnaround_seconds": turnaround}),)),
        "semantic": Lever("semantic", workloads.semantic_settings,
                          partial(workloads.semantic_requests, make=Req), bodies=True),
        "route": Lever("route", route_settings, partial(workloads.route_requests, make=Req),
                       bodies=True),
        "trim": Lever("trim", workloads.trim_settings, partial(workloads.trim_requests, make=Req),
                      bodies=True),
    }  # fmt: skip


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument(
        "--rounds",
        type=int,
        default=2,
        help="live off/on pairs per lever (the latency change: their median)",
    )
    parser.add_argument("--levers", default=",".join(LEVERS),
                        help=f"which, comma-separated (default: {','.join(LEVERS)})")  # fmt: skip
    add_output_options(parser)
    args = parser.parse_args(argv)
    out = Output.of(args)
    unknown = set(args.levers.split(",")) - set(LEVERS)
    if unknown:
        parser.error(f"unknown levers: {', '.join(sorted(unknown))}")
    logging.getLogger("levergate").setLevel(logging.ERROR)
    count = 30 if args.smoke else args.requests
    when = stamp()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="analyze-accuracy-") as folder:
        trained: list[Path] = []

        def router() -> Path:  # trained once, when the route lever first needs it
            if not trained:
                rows = 80 if args.smoke else workloads.TRAIN_ROWS
                trained.append(workloads.router_file(Path(folder), rows=rows))
            return trained[0]

        levers = lever_runs(turnaround := 0.5 if args.smoke else TURNAROUND, router)
        pace = SMOKE_PACE if args.smoke else Pace()
        runs = [lever_run(levers[name], 12 if args.smoke and levers[name].bodies else count,
                          Path(folder), 1 if args.smoke else args.rounds, pace=pace)
                for name in args.levers.split(",")]  # fmt: skip
    wall = time.monotonic() - started
    out.write("analyze_accuracy", {**when, "runs": runs, "goal": GOAL},
              report(runs, when, wall, turnaround, pace.scale))  # fmt: skip


if __name__ == "__main__":
    main()
