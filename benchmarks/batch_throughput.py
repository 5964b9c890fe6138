"""A 10,000-line batch against a rate-limited provider (issue 14, item 8): how much of the
provider's limit the batch runner uses, how many provider 429s reach the job, and what the
batch does to interactive latency.

`levergate sim` limits its key to `LIMIT` requests per `WINDOW` s (sliding window; time
compressed 10x from a 60 s window, so 100 requests per real second) and a token budget with
headroom; `levergate serve` in front of it knows the same limits (`key_limits`, GCRA pacing,
the waiting room: interactive before batch) and runs the batch (`batch.enabled`, SQLite job
store). Caches are off: every line reaches the provider, so throughput is the runner's.

    interactive alone     open-loop Poisson chat requests at 10% of the limit, marked
                          `x-levergate-priority: interactive`, on an idle gateway
    batch + interactive   a fresh simulator and gateway; a batch of `--lines` lines submitted
                          through the OpenAI SDK; one window later the same interactive load
                          for the same time, while the batch runs on

Throughput is measured over the batch's steady part (from 2% to 98% of its lines done), as
provider-accepted requests per second (batch + interactive, from the simulator's own count)
over the limit. "429s seen" are the simulator's; "passed to the job" are error-file lines with
status 429 (the runner retries a 429 up to `batch.max_attempts` before it would give one up).
The crash/resume record is read from results/batch_kill.json (benchmarks/batch_kill.py).

    PYTHONPATH=src python benchmarks/batch_throughput.py [--lines 10000] [--seconds 60]
        [--concurrency 16] [--ttft-ms 100] [--name batch_throughput] [--quick | --smoke]

writes benchmarks/results/batch_throughput.{json,md}.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import random
import sqlite3
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import openai
import orjson
from harness import RESULTS, Output, add_output_options, free_port, stamp
from traffic_common import chat_body, control, process, sleep_until

from levergate.bench.stats import percentile
from levergate.layers.measure.measure import OVERHEAD_HEADER

WINDOW = 6.0  # seconds: a 60 s window compressed 10x
LIMIT = 600  # requests per window: 100/s
TOKENS_LIMIT = 600 * 200  # tokens per window: about 2x what the lines reserve
INTERACTIVE_SHARE = 0.1
TOKENS, TOKENS_PER_S = 16, 400.0
PRIORITY = "x-levergate-priority"


def sim_config(ttft_ms: float) -> dict[str, Any]:
    return {
        "seed": 1,
        "latency": {"ttft_ms": ttft_ms, "tokens_per_second": TOKENS_PER_S, "jitter": 0.2},
        "limits": {"rpm": LIMIT, "tpm": TOKENS_LIMIT, "window_seconds": WINDOW},
    }


def gateway_config(sim_url: str, workdir: Path, *, concurrency: int) -> dict[str, Any]:
    limits = {"rpm": LIMIT, "tpm": TOKENS_LIMIT, "window_seconds": WINDOW}
    return {
        "upstreams": [
            {"name": "provider", "base_url": sim_url, "api_key": "sk-bench", "key_limits": limits}
        ],
        "models": [{"name": "*", "upstream": "provider"}],
        "cache": {"enabled": False},
        "traffic": {"seed": 1},
        "batch": {
            "enabled": True,
            "dir": str(workdir / "files"),
            "store": {"sqlite_path": str(workdir / "batch.sqlite3")},
            "concurrency": concurrency,
            "poll_seconds": 0.2,
        },
    }


def batch_lines(n: int) -> bytes:
    return b"".join(
        orjson.dumps({
            "custom_id": f"line-{i}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {
                "model": "sim-small",
                "max_tokens": TOKENS,
                "messages": [{"role": "user", "content": f"Summarize document number {i}."}],
            },
        })
        + b"\n"
        for i in range(n)
    )  # fmt: skip


@dataclass(slots=True)
class Probe:
    """Open-loop interactive requests: (latency from the intended send, gateway ms, status)."""

    seconds: float
    rate: float = INTERACTIVE_SHARE * LIMIT / WINDOW
    seed: int = 1
    results: list[tuple[float, float, int]] = field(default_factory=list)

    async def run(self, url: str) -> None:
        rng = random.Random(self.seed)
        start = time.perf_counter()
        moment = start
        async with aiohttp.ClientSession() as session, asyncio.TaskGroup() as tasks:
            for index in itertools.count():
                moment += rng.expovariate(self.rate)
                if moment - start >= self.seconds:
                    break
                await sleep_until(moment)
                tasks.create_task(self._one(session, url, index, moment))

    async def _one(
        self, session: aiohttp.ClientSession, url: str, index: int, intended: float
    ) -> None:
        body = chat_body(index, max_tokens=TOKENS)
        async with session.post(
            f"{url}/v1/chat/completions", json=body, headers={PRIORITY: "interactive"}
        ) as response:
            await response.read()
            overhead = float(response.headers.get(OVERHEAD_HEADER, "nan"))
            self.results.append(
                ((time.perf_counter() - intended) * 1000, overhead, response.status)
            )


def interactive_row(probe: Probe) -> dict[str, Any]:
    ok = [(total, gateway) for total, gateway, status in probe.results if status == 200]
    totals, gateways = sorted(t for t, _ in ok), sorted(g for _, g in ok)
    upstream = sorted(t - g for t, g in ok)
    errors = Counter(str(status) for _, _, status in probe.results if status != 200)
    return {
        "target_per_s": round(probe.rate, 2),
        "achieved_per_s": round(len(probe.results) / probe.seconds, 2),
        "sent": len(probe.results),
        "ok": len(ok),
        "errors": dict(errors),
        "p50_ms": round(percentile(totals, 50), 1),
        "p99_ms": round(percentile(totals, 99), 1),
        "max_ms": round(totals[-1], 1),
        # The gateway's own time (x-levergate-overhead-ms: waiting room, pipeline, event loop)
        # and the rest (the provider, and the sockets to it), to tell which one moved.
        "gateway_p50_ms": round(percentile(gateways, 50), 1),
        "gateway_p99_ms": round(percentile(gateways, 99), 1),
        "upstream_p99_ms": round(percentile(upstream, 99), 1),
    }


async def alone(
    seconds: float, workdir: Path, *, concurrency: int, ttft_ms: float
) -> dict[str, Any]:
    sim_port, gw_port = free_port(), free_port()
    sim_url = f"http://127.0.0.1:{sim_port}/v1"
    config = gateway_config(sim_url, workdir / "alone", concurrency=concurrency)
    with (
        process(["sim"], port=sim_port, config=sim_config(ttft_ms), workdir=workdir),
        process(["serve"], port=gw_port, config=config, workdir=workdir),
    ):
        probe = Probe(seconds)
        await probe.run(f"http://127.0.0.1:{gw_port}")
    return interactive_row(probe)


class Watch:
    """(time, lines done, provider-accepted requests) every quarter second while the batch runs."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, int, int]] = []

    async def run(self, client: openai.AsyncOpenAI, sim_url: str, batch_id: str) -> Any:
        while True:
            batch = await client.batches.retrieve(batch_id)
            stats = await control(sim_url, "GET", "/sim/stats")
            counts = batch.request_counts
            done = counts.completed + counts.failed if counts else 0
            # Generation requests only: `requests_total` counts these /sim/stats polls too.
            chat = stats["requests_by_endpoint"].get("/v1/chat/completions", 0)
            accepted = chat - stats["rate_limited"]
            self.samples.append((time.monotonic(), done, accepted))
            if batch.status in ("completed", "failed", "expired", "cancelled"):
                return batch
            await asyncio.sleep(0.25)

    def steady(self, lines: int) -> dict[str, float]:
        low = next(s for s in self.samples if s[1] >= 0.02 * lines)
        high = next(s for s in self.samples if s[1] >= 0.98 * lines)
        span = high[0] - low[0] or float("nan")  # a batch done within one sample: no rate
        return {
            "steady_seconds": round(span, 1),
            "batch_per_s": round((high[1] - low[1]) / span, 2),
            "provider_accepted_per_s": round((high[2] - low[2]) / span, 2),
        }


async def with_batch(
    lines: int, seconds: float, workdir: Path, *, concurrency: int, ttft_ms: float, lead: float
) -> dict[str, Any]:
    sim_port, gw_port = free_port(), free_port()
    sim_url, url = f"http://127.0.0.1:{sim_port}/v1", f"http://127.0.0.1:{gw_port}"
    home = workdir / "batch"
    config = gateway_config(sim_url, home, concurrency=concurrency)
    watch = Watch()
    with (
        process(["sim"], port=sim_port, config=sim_config(ttft_ms), workdir=workdir),
        process(["serve"], port=gw_port, config=config, workdir=workdir),
    ):
        async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="x", max_retries=5) as client:
            uploaded = await client.files.create(file=("in.jsonl", batch_lines(lines)),
                                                 purpose="batch")  # fmt: skip
            batch = await client.batches.create(input_file_id=uploaded.id,
                                                endpoint="/v1/chat/completions",
                                                completion_window="24h")  # fmt: skip
            async with asyncio.TaskGroup() as tasks:
                watching = tasks.create_task(watch.run(client, sim_url, batch.id))
                await asyncio.sleep(lead)
                interactive = Probe(seconds)
                await interactive.run(url)
            batch = watching.result()
            errors = await error_lines(client, batch.error_file_id)
        stats = await control(sim_url, "GET", "/sim/stats")
    return {
        "lines": lines,
        "status": batch.status,
        "completed": batch.request_counts.completed if batch.request_counts else 0,
        "failed": batch.request_counts.failed if batch.request_counts else 0,
        "error_statuses": errors,
        "passed_429s": errors.get("429", 0),
        "provider_429s": stats["rate_limited"],
        "attempts": attempts(home / "batch.sqlite3", batch.id),
        **watch.steady(lines),
        "interactive": interactive_row(interactive),
    }


async def error_lines(client: openai.AsyncOpenAI, file_id: str | None) -> dict[str, int]:
    if not file_id:
        return {}
    content = (await client.files.content(file_id)).content
    found: Counter[str] = Counter()
    for raw in content.splitlines():
        if raw.strip():
            response = orjson.loads(raw).get("response") or {}
            found[str(response.get("status_code", "none"))] += 1
    return dict(found)


def attempts(path: Path, batch_id: str) -> dict[str, int]:
    """Lines by how many attempts they took (more than one: a retried 429 or 5xx)."""
    with sqlite3.connect(path) as db:
        rows = db.execute(
            "SELECT attempts, count(*) FROM lines WHERE job_id = ? GROUP BY attempts", (batch_id,)
        ).fetchall()
    return {str(k): v for k, v in rows}


def kill_record() -> dict[str, Any] | None:
    path = RESULTS / "batch_kill.json"
    return json.loads(path.read_text()) if path.exists() else None


def report(data: dict[str, Any]) -> str:
    run, solo = data["with_batch"], data["alone"]
    mixed = run["interactive"]
    limit_per_s = LIMIT / WINDOW
    share = run["provider_accepted_per_s"] / limit_per_s
    ratio = mixed["p99_ms"] / solo["p99_ms"]
    lines = [
        "# Batch throughput against a rate-limited provider",
        "",
        f"{data['date']} · {data['machine']} (2 CPUs shared with other work: provisional).",
        (
            f"Provider: {LIMIT} requests and {TOKENS_LIMIT} tokens per {WINDOW:g} s window "
            f"({limit_per_s:g} requests/s), the gateway's `key_limits` the same; answers ~"
            f"{data['ttft_ms']:.0f} ms + {TOKENS} tokens at {TOKENS_PER_S:.0f}/s. "
            f"Batch: {run['lines']} lines, `batch.concurrency` {data['concurrency']}. "
            f"Interactive: open loop, Poisson, {INTERACTIVE_SHARE:.0%} of the limit for "
            f"{data['seconds']:g} s."
        ),
        "",
        "| measure | value | goal |",
        "|---|---:|---|",
        f"| batch status | {run['status']} ({run['completed']} ok, {run['failed']} failed) | |",
        (
            f"| provider-accepted requests/s (steady {run['steady_seconds']} s) "
            f"| {run['provider_accepted_per_s']} | |"
        ),
        f"| share of the provider limit | {share:.1%} | >= 95% |",
        f"| batch lines/s | {run['batch_per_s']} | |",
        f"| provider 429s seen by the gateway | {run['provider_429s']} | |",
        f"| provider 429s passed to the job | {run['passed_429s']} | 0 |",
        f"| lines by attempts | {run['attempts']} | |",
        f"| interactive p99 alone | {solo['p99_ms']:.0f} ms | |",
        f"| interactive p99 with the batch | {mixed['p99_ms']:.0f} ms, {ratio:.2f}x | <= 1.10x |",
        "",
        (
            "| interactive | target/s | achieved/s | ok/sent | p50 ms | p99 ms | max ms "
            "| gateway p50 / p99 ms | upstream p99 ms | errors |"
        ),
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, row in (("alone", solo), ("with the batch", mixed)):
        errors = ", ".join(f"{k}: {v}" for k, v in row["errors"].items()) or "0"
        lines.append(
            f"| {name} | {row['target_per_s']:g} | {row['achieved_per_s']:g} "
            f"| {row['ok']}/{row['sent']} | {row['p50_ms']:.0f} | {row['p99_ms']:.0f} "
            f"| {row['max_ms']:.0f} | {row['gateway_p50_ms']:.1f} / {row['gateway_p99_ms']:.1f} "
            f"| {row['upstream_p99_ms']:.0f} | {errors} |"
        )
    kill = data.get("kill_record")
    lines += ["", "## Crash and resume (results/batch_kill.json, benchmarks/batch_kill.py)", ""]
    if kill:
        lines.append(
            f"{kill['date']}: {kill['kills']} SIGKILLs ({kill['kills_mid_batch']} mid-batch) of "
            f"a {kill['lines']}-line batch: lines lost {kill['lost']}, twice in the output "
            f"{kill['duplicated_in_output']}, mismatched {kill['mismatched']}; duplicate "
            f"upstream calls {kill['duplicate_upstream_calls']} (bound {kill['duplicate_bound']})."
        )
    else:
        lines.append("Not run yet: `python benchmarks/batch_kill.py`.")
    return "\n".join(lines) + "\n"


async def main(args: argparse.Namespace) -> None:
    out = Output.of(args)
    knobs: dict[str, Any] = {"concurrency": args.concurrency, "ttft_ms": args.ttft_ms}
    # The interactive load starts one window into the batch (its steady state); in a smoke
    # run, half a second in.
    lead = 0.5 if args.smoke else WINDOW
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        solo = await alone(args.seconds, workdir, **knobs)
        print(json.dumps({"alone": solo}), flush=True)
        run = await with_batch(args.lines, args.seconds, workdir, lead=lead, **knobs)
        print(json.dumps({"with_batch": run}), flush=True)
    data = {**stamp(), "seconds": args.seconds, **knobs, "limit": LIMIT,
            "window_seconds": WINDOW, "tokens_limit": TOKENS_LIMIT, "alone": solo,
            "with_batch": run, "kill_record": kill_record()}  # fmt: skip
    out.write(args.name, data, report(data))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=60.0, help="interactive load length")
    parser.add_argument("--concurrency", type=int, default=16, help="batch.concurrency")
    parser.add_argument("--ttft-ms", type=float, default=100.0, help="the provider's latency")
    parser.add_argument("--name", default="batch_throughput", help="results/<name>.{json,md}")
    parser.add_argument("--quick", action="store_true", help="2,000 lines, 15 s")
    add_output_options(parser)
    args = parser.parse_args()
    if args.quick:
        args.lines, args.seconds = 2000, 15.0
    if args.smoke:
        args.lines, args.seconds = 150, 1.0
    asyncio.run(main(args))
