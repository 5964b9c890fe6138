"""Money saved by automatic Anthropic cache breakpoints, on a multi-tenant workload.

Twenty tenants, each with a long system prompt made of several community prompts from
../shared/data/awesome_chatgpt_prompts/prompts.csv (CC0; read from ../shared at run time),
send single-turn questions as Poisson arrivals whose mean gaps span 5 seconds (a busy tenant)
to 40 minutes (a rare one), for `--hours` of virtual time. Each request goes through the whole
gateway in process (`Gateway.chat`: the prompt-cache optimizer, the `kind: anthropic`
upstream's translation, Measure and the cost ledger) to the simulator's Anthropic Messages
handler with its prompt-cache accounting (explicit breakpoints, 5-minute and 1-hour entries,
refreshed on reads), called directly instead of over a socket. Time is virtual
(`run_virtual`, `LoopClock` for both the gateway and the simulator), so hours take seconds.

Compared, on the same arrivals:
- `none`: no breakpoints (`prompt_cache.breakpoints.enabled: false`);
- `auto`: levergate's breakpoints, TTL chosen from the observed reuse (the default);
- `always 5m` / `always 1h`: a breakpoint at every boundary long enough, always that TTL
  (`breakpoints.ttl: 5m | 1h`): the naive rules.
Money is the ledger's (each `RequestRecord`'s `cost_usd` and `savings["prompt_cache"]`, priced
at the built-in catalog's claude-sonnet-4-5 rates: input $3, cache read $0.30, 5-minute write
$3.75, 1-hour write $6 per million tokens). A write "never paid back" is a cache write of a
tenant's prefix whose following reads (until that tenant's next write) saved less than the
write's premium.

Then the optimizer's own CPU: the layer alone over a no-op upstream for a typical prompt
(a tenant's system prompt and a question), and whole in-process requests with the layer on
and off, as a ratio in one run.

    python benchmarks/prompt_cache.py [--hours 3] [--seed 7] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import math
import random
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from harness import Output, add_output_options, data_file, stamp
from prometheus_client import CollectorRegistry

from levergate import Gateway, Settings
from levergate.catalog import Catalog
from levergate.config import PromptCacheSettings
from levergate.core.call import Call, Context
from levergate.core.controls import Principal
from levergate.core.reply import Completed, Reply
from levergate.layers.measure.record import RequestRecord
from levergate.layers.prompt_cache import PromptCacheOptimizer, PromptCacheState, Provider
from levergate.pipeline import Deps
from levergate.simulator import SimSettings, Simulator
from levergate.testing import LoopClock, run_virtual

PROMPTS = "awesome_chatgpt_prompts/prompts.csv"
MODEL = "claude-sonnet-4-5"
TENANTS = 20
MIN_SYSTEM_CHARS = 6000  # about 1,500 tokens: over Anthropic's 1,024-token minimum
FASTEST, SLOWEST = 5.0, 2400.0  # mean seconds between a tenant's requests
MODES: dict[str, dict[str, Any]] = {
    "none": {"breakpoints": {"enabled": False}},
    "auto": {},
    "always 5m": {"breakpoints": {"ttl": "5m"}},
    "always 1h": {"breakpoints": {"ttl": "1h"}},
}
WINDOWS = (0, 1000, 4000, 10000)  # distinct prompts the layer has seen before a timed window
QUESTIONS = ("Summarise your role in one line.", "What should I ask you first?",
             "Give me one example.", "What do you need from me?", "List three tips.")  # fmt: skip


@dataclass(frozen=True)
class Arrival:
    at: float
    tenant: int
    question: str


def system_prompts(*, seed: int) -> list[str]:
    """One long system prompt per tenant, several prompts of the data set each."""
    csv.field_size_limit(sys.maxsize)
    with data_file(PROMPTS).open(newline="") as f:
        rows = [r["prompt"] for r in csv.DictReader(f)
                if r["type"] == "TEXT" and 300 <= len(r["prompt"]) <= 4000]  # fmt: skip
    rng = random.Random(seed)
    rng.shuffle(rows)
    out, at = [], 0
    for _ in range(TENANTS):
        parts: list[str] = []
        while sum(map(len, parts)) < MIN_SYSTEM_CHARS:
            parts.append(rows[at])
            at += 1
        out.append("\n\n".join(parts))
    return out


def arrivals(*, hours: float, seed: int) -> list[Arrival]:
    """Poisson arrivals per tenant, mean gaps log-spaced from FASTEST to SLOWEST."""
    rng = random.Random(seed)
    horizon = hours * 3600.0
    found: list[Arrival] = []
    for tenant in range(TENANTS):
        gap = FASTEST * (SLOWEST / FASTEST) ** (tenant / (TENANTS - 1))
        t = rng.expovariate(1.0 / gap)
        while t < horizon:
            found.append(Arrival(t, tenant, rng.choice(QUESTIONS) + f" (#{len(found)})"))
            t += rng.expovariate(1.0 / gap)
    return sorted(found, key=lambda a: a.at)


class SimClient:
    """An `HttpClient` that hands each request to an in-process `Simulator` (no socket)."""

    def __init__(self, sim: Simulator) -> None:
        self._sim = sim
        self.cpu = 0.0  # CPU seconds spent in the simulator (not the gateway's)

    async def request(
        self, method: str, url: str, *, body: bytes | None, headers: Mapping[str, str]
    ) -> SimResponse:
        path = "/" + url.split("/", 3)[3]
        lowered = {k.lower(): v for k, v in headers.items()}
        started = time.process_time()
        reply = self._sim.handle(method=method, path=path, headers=lowered, body=body or b"")
        self._sim.finish(reply)
        self.cpu += time.process_time() - started
        return SimResponse(reply.status, dict(reply.headers), reply.body)

    async def aclose(self) -> None:
        return None


@dataclass
class SimResponse:
    status: int
    headers: dict[str, str]
    body: bytes

    async def read(self) -> bytes:
        return self.body

    async def chunks(self) -> Any:
        yield self.body

    async def aclose(self) -> None:
        return None


@dataclass
class Tally:
    """What the ledger's records of one mode add up to."""

    records: list[tuple[int, RequestRecord]] = field(default_factory=list)
    pending: list[int] = field(default_factory=list)

    def emit(self, record: RequestRecord) -> None:
        self.records.append((self.pending.pop(0), record))


def settings_for(mode: Mapping[str, Any], *, enabled: bool = True) -> Settings:
    return Settings.load(
        upstreams=[{"kind": "anthropic", "name": "anthropic", "base_url": "http://sim.local",
                    "api_key": "sk-ant-bench-0000"}],
        models=[{"name": "claude", "upstream": "anthropic", "upstream_model": MODEL}],
        cache={"enabled": False},
        prompt_cache={"enabled": enabled, **mode},
    )  # fmt: skip


async def replay(mode: Mapping[str, Any], systems: list[str], plan: list[Arrival]) -> Tally:
    clock = LoopClock()
    sim = Simulator(settings=SimSettings(), clock=clock)
    tally = Tally()
    deps = Deps(clock=clock, http_client=lambda _u: SimClient(sim), sinks=[tally])
    loop = asyncio.get_running_loop()
    async with Gateway(settings_for(mode), deps=deps) as gateway:
        for a in plan:
            await asyncio.sleep(max(0.0, a.at - loop.time()))
            tally.pending.append(a.tenant)
            await gateway.chat(
                model="claude", max_tokens=64, headers={"x-levergate-tenant": f"t{a.tenant}"},
                messages=[{"role": "system", "content": systems[a.tenant]},
                          {"role": "user", "content": a.question}],
            )  # fmt: skip
            await asyncio.sleep(0)  # the record is built on the next loop turn
    return tally


def summarise(tally: Tally, rates: Any) -> dict[str, Any]:
    prompt = read = written = 0
    cost = input_cost = saved = 0.0
    by_tenant: dict[int, list[RequestRecord]] = {}
    for tenant, r in tally.records:
        t = r.tokens
        prompt, read, written = prompt + t.input, read + t.cached_read, written + t.cache_write
        cost += r.cost_usd
        input_cost += r.cost_usd - t.output * rates.output / 1e6
        saved += r.savings.get("prompt_cache", 0.0)
        by_tenant.setdefault(tenant, []).append(r)
    writes, unpaid, unpaid_usd, tails, tails_usd = 0, 0, 0.0, 0, 0.0
    for records in by_tenant.values():
        episode: float | None = None  # the open prefix write's premium, less what reads saved
        for r in records:
            t = r.tokens
            premium = ((t.cache_write - t.cache_write_1h) * (rates.cache_write - rates.input)
                       + t.cache_write_1h * (rates.cache_write_1h - rates.input)) / 1e6  # fmt: skip
            if t.cache_write and not t.cached_read:  # the tenant's prefix written (again)
                if episode is not None and episode > 0:
                    unpaid, unpaid_usd = unpaid + 1, unpaid_usd + episode
                writes, episode = writes + 1, premium
            elif t.cache_write:  # a tail written after a read: this request's own question
                tails, tails_usd = tails + 1, tails_usd + premium
            if t.cached_read and episode is not None:
                episode -= t.cached_read * (rates.input - rates.cache_read) / 1e6
        if episode is not None and episode > 0:
            unpaid, unpaid_usd = unpaid + 1, unpaid_usd + episode
    return {
        "requests": len(tally.records), "cost_usd": cost, "input_cost_usd": input_cost,
        "prompt_cache_saved_usd": saved, "hit_ratio": read / prompt if prompt else 0.0,
        "cached_read_tokens": read, "cache_write_tokens": written, "writes": writes,
        "writes_never_paid_back": unpaid, "unpaid_write_usd": unpaid_usd,
        "tail_writes": tails, "tail_write_usd": tails_usd,
    }  # fmt: skip


async def layer_cpu(system: str, *, n: int, windows: tuple[int, ...] = WINDOWS) -> dict[str, float]:
    """The optimizer alone over a no-op upstream, against the no-op alone (µs per request)."""

    async def upstream(_call: Call) -> Reply:
        return Completed(data={})

    settings = PromptCacheSettings()
    clock = LoopClock()
    layer = PromptCacheOptimizer(
        upstream, settings=settings, model="claude", provider=Provider.ANTHROPIC,
        state=PromptCacheState(settings, registry=CollectorRegistry()), clock=clock,
    )  # fmt: skip

    def call(i: int) -> Call:
        question = f"Question {i}: give me one example."
        body = {"model": "claude", "max_tokens": 64,
                "messages": [{"role": "system", "content": system},
                             {"role": "user", "content": question}]}  # fmt: skip
        return Call(kind="chat", body=body, ctx=Context(f"r{i}", principal=Principal(tenant="t")))

    calls = [call(i) for i in range(n)]
    started = time.process_time()
    for c in calls:
        await upstream(c)
    timings = {"off": (time.process_time() - started) / n * 1e6}
    # The layer's cost as the alias's memory of prompts fills: windows of `n` requests after
    # `done` earlier distinct prompts (each question is new).
    done = 0
    for after in windows:
        for i in range(done, after):
            await layer(call(i))
        calls = [call(after + i) for i in range(n)]
        started = time.process_time()
        for c in calls:
            await layer(c)
        timings[f"on after {after}"] = (time.process_time() - started) / n * 1e6
        done = after + n
    return timings


async def gateway_cpu(system: str, *, n: int, enabled: bool) -> float:
    """The gateway's CPU µs per in-process request (the simulator's own time taken out), the
    optimizer on or off."""
    clock = LoopClock()
    client = SimClient(Simulator(settings=SimSettings(), clock=clock))
    deps = Deps(clock=clock, http_client=lambda _u: client)
    async with Gateway(settings_for({}, enabled=enabled), deps=deps) as gateway:
        messages = [{"role": "system", "content": system}, {"role": "user", "content": "Hi"}]
        for _ in range(50):  # warm up
            await gateway.chat(model="claude", max_tokens=64, messages=messages)
        started, in_sim = time.process_time(), client.cpu
        for i in range(n):
            messages[1] = {"role": "user", "content": f"Question {i}: give me one example."}
            await gateway.chat(model="claude", max_tokens=64, messages=messages)
            await asyncio.sleep(0.01)  # time passes between requests (virtual)
        return (time.process_time() - started - (client.cpu - in_sim)) / n * 1e6


def markdown(meta: dict[str, Any], results: dict[str, dict[str, Any]], cpu: dict[str, Any]) -> str:
    base = results["none"]["cost_usd"]
    base_in = results["none"]["input_cost_usd"]
    head = (
        f"{meta['date']} on {meta['machine']}. {TENANTS} tenants, system prompts of "
        f"{meta['system_tokens_min']:,}-{meta['system_tokens_max']:,} tokens (awesome-chatgpt-"
        f"prompts, CC0), Poisson arrivals with mean gaps from {FASTEST:g} s to "
        f"{SLOWEST / 60:g} min per tenant, {meta['hours']:g} h of virtual time, "
        f"{meta['requests']:,} requests, {MODEL} prices from the built-in catalog, through the "
        "whole gateway (optimizer, kind: anthropic upstream, ledger) to the simulator's "
        "Anthropic prompt-cache accounting."
    )
    columns = (
        "| breakpoints | spend $ | saving vs none | prompt-side saving | cache hit ratio "
        "| prefix writes | never paid back (count, $) | tail writes (count, $) |"
    )
    lines = ["# Automatic Anthropic cache breakpoints: money on a multi-tenant workload", "",
             head, "", columns, "|---|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for name, r in results.items():
        saving = 1 - r["cost_usd"] / base
        saving_in = 1 - r["input_cost_usd"] / base_in
        lines.append(
            f"| {name} | {r['cost_usd']:.4f} | {saving:.1%} | {saving_in:.1%} | "
            f"{r['hit_ratio']:.1%} | {r['writes']:,} | {r['writes_never_paid_back']:,}, "
            f"{r['unpaid_write_usd']:.4f} | {r['tail_writes']:,}, {r['tail_write_usd']:.4f} |"
        )
    legend = (
        "Prompt-side saving leaves out the output tokens (the same in every mode). A prefix "
        "write (the tenant's system prompt written to the cache) never paid back: its premium "
        "over the input price exceeded what the reads that followed it (until the tenant's next "
        "prefix write) saved. A tail write is the end of a prompt written after a read (a "
        "breakpoint at the end of the prompt): in this single-turn workload no later request "
        "reads it."
    )
    windows = ", ".join(
        f"{k.removeprefix('on after ')}: {v:.0f} µs" for k, v in cpu.items() if k.startswith("on")
    )
    layer = (
        "- the layer alone over a no-op upstream, by how many distinct prompts of the alias it "
        f"has seen before (each question is new): {windows} (the no-op alone "
        f"{cpu['noop_us']:.2f} µs);"
    )
    whole = (
        "- the gateway's CPU per in-process request (Gateway.chat through the kind: anthropic "
        "upstream; the simulator's own time taken out): "
        f"{cpu['gateway_on_us']:.0f} µs with the optimizer, {cpu['gateway_off_us']:.0f} µs "
        f"without: {cpu['gateway_ratio']:.2f}x."
    )
    title = "## The optimizer's CPU per request (a tenant's system prompt + a question)"
    lines += ["", legend, "", title, "", layer, whole, ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hours", type=float, default=3.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--cpu-requests", type=int, default=2000)
    add_output_options(parser)
    args = parser.parse_args()
    out = Output.of(args)
    windows = WINDOWS
    if args.smoke:  # three minutes of virtual time, a few requests timed
        args.hours, args.cpu_requests, windows = 0.05, 20, WINDOWS[:2]
    systems = system_prompts(seed=args.seed)
    plan = arrivals(hours=args.hours, seed=args.seed)
    rates = Catalog.build(settings_for({})).rates("claude", MODEL)
    results = {}
    for name, mode in MODES.items():
        results[name] = summarise(run_virtual(replay(mode, systems, plan)), rates)
        print(name, results[name], file=sys.stderr)
    typical = systems[len(systems) // 2]
    layer = asyncio.run(layer_cpu(typical, n=min(args.cpu_requests, 500), windows=windows))
    on = run_virtual(gateway_cpu(typical, n=args.cpu_requests, enabled=True))
    off = run_virtual(gateway_cpu(typical, n=args.cpu_requests, enabled=False))
    cpu = {**{k: v - layer["off"] for k, v in layer.items() if k != "off"},
           "noop_us": layer["off"], "gateway_on_us": on, "gateway_off_us": off,
           "gateway_ratio": on / off}  # fmt: skip
    tokens = [math.ceil(len(s) / 4) for s in systems]
    meta = {**stamp(), "hours": args.hours, "seed": args.seed, "requests": len(plan),
            "system_tokens_min": min(tokens), "system_tokens_max": max(tokens)}  # fmt: skip
    out.write("prompt_cache", {**meta, "modes": results, "cpu": cpu}, markdown(meta, results, cpu))


if __name__ == "__main__":
    main()
