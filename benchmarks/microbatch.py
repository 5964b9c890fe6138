"""Micro-batching of one-input embedding requests: requests/s and latency with and without it.

    PYTHONPATH=src python benchmarks/microbatch.py [--seconds 8] [--clients 64] [--smoke]

The simulator stands in for a hosted embeddings API with a realistic per-call latency (60 ms
per call plus 0.02 ms per token, log-normal jitter 0.2: hosted embeddings calls take tens to
hundreds of ms whatever the batch size) and an RPM limit per key, as providers have. Closed-loop
clients each send one-input `/v1/embeddings` requests through the gateway (real servers on
loopback, one process) for a fixed time, once with `microbatch` off and once on; the ratios come
from the same run. Writes results/microbatch.json and .md.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

import httpx
from harness import Output, add_output_options, stamp

from levergate.config import Settings
from levergate.gateway import Gateway
from levergate.server.run import serving
from levergate.simulator import SimSettings, run_simulator

SIM: dict[str, Any] = {"latency": {"ttft_ms": 60.0, "prefill_ms_per_token": 0.02, "jitter": 0.2}}
# The same provider with a per-key limit of 1,200 requests per minute, enforced per rolling
# second (20 calls/s): a 60-second window would let an 8-second run burst through unlimited.
LIMITED = {**SIM, "limits": {"rpm": 20, "window_seconds": 1.0}}


async def load(url: str, *, clients: int, seconds: float) -> dict[str, Any]:
    latencies: list[float] = []
    errors = 0
    stop_at = time.perf_counter() + seconds

    async def client(n: int, http: httpx.AsyncClient) -> None:
        nonlocal errors
        i = 0
        while i == 0 or time.perf_counter() < stop_at:  # at least one request each
            started = time.perf_counter()
            body = {
                "model": "sim-embed",
                "input": f"client {n} sentence {i}",
                "dimensions": 256,
                "encoding_format": "base64",
            }
            reply = await http.post("/embeddings", json=body)
            if reply.status_code == 200:
                latencies.append(time.perf_counter() - started)
            else:
                errors += 1
            i += 1

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=30.0) as http:
        began = time.perf_counter()
        await asyncio.gather(*[client(n, http) for n in range(clients)])
        elapsed = time.perf_counter() - began
    latencies.sort()
    return {
        "requests": len(latencies),
        "errors": errors,
        "rps": len(latencies) / elapsed,
        "p50_ms": 1000 * statistics.median(latencies) if latencies else 0.0,
        "p99_ms": 1000 * latencies[int(0.99 * (len(latencies) - 1))] if latencies else 0.0,
    }


async def run_one(
    *, batching: bool, clients: int, seconds: float, wait_ms: float, sim: dict[str, Any] = SIM
) -> dict[str, Any]:
    async with run_simulator(SimSettings(port=0, **sim)) as handle:
        result = await _through_gateway(
            handle.base_url, batching=batching, clients=clients, seconds=seconds, wait_ms=wait_ms
        )
        result["upstream_calls"] = handle.stats()["requests_by_endpoint"].get("/v1/embeddings", 0)
        result["rate_limited"] = handle.stats()["rate_limited"]
    result["requests_per_upstream_call"] = result["requests"] / max(1, result["upstream_calls"])
    return result


async def _through_gateway(
    base_url: str, *, batching: bool, clients: int, seconds: float, wait_ms: float
) -> dict[str, Any]:
    settings = Settings.for_upstream(
        base_url, server={"port": 0}, cache={"enabled": False},
        microbatch={"enabled": batching, "max_wait_ms": wait_ms},
    )  # fmt: skip
    async with Gateway(settings) as gateway, serving(gateway) as url:
        return await load(url, clients=clients, seconds=seconds)


async def main(*, clients: int, seconds: float, wait_ms: float) -> dict[str, Any]:
    off = await run_one(batching=False, clients=clients, seconds=seconds, wait_ms=wait_ms)
    on = await run_one(batching=True, clients=clients, seconds=seconds, wait_ms=wait_ms)
    # One client alone: the latency the wait adds when there is nobody to batch with.
    lone_off = await run_one(batching=False, clients=1, seconds=seconds / 2, wait_ms=wait_ms)
    lone_on = await run_one(batching=True, clients=1, seconds=seconds / 2, wait_ms=wait_ms)
    limited_off = await run_one(batching=False, clients=clients, seconds=seconds,
                                wait_ms=wait_ms, sim=LIMITED)  # fmt: skip
    limited_on = await run_one(batching=True, clients=clients, seconds=seconds,
                               wait_ms=wait_ms, sim=LIMITED)  # fmt: skip
    return {
        "stamp": stamp(), "limited_off": limited_off, "limited_on": limited_on,
        "limited_rps_ratio": limited_on["rps"] / max(1e-9, limited_off["rps"]),
        "clients": clients, "seconds": seconds, "max_wait_ms": wait_ms,
        "simulator": SIM, "off": off, "on": on, "lone_off": lone_off, "lone_on": lone_on,
        "rps_ratio": on["rps"] / max(1e-9, off["rps"]),
        "upstream_calls_ratio": on["upstream_calls"] / max(1, off["upstream_calls"]),
        "lone_p50_added_ms": lone_on["p50_ms"] - lone_off["p50_ms"],
        "lone_p99_added_ms": lone_on["p99_ms"] - lone_off["p99_ms"],
    }  # fmt: skip


def markdown(data: dict[str, Any]) -> str:
    rows = [
        (
            "| run | clients | requests/s | p50 ms | p99 ms | upstream calls | requests per call "
            "| errors | sim 429s |"
        ),
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    c = data["clients"]
    for name, clients in (("off", c), ("on", c), ("lone_off", 1), ("lone_on", 1),
                          ("limited_off", c), ("limited_on", c)):  # fmt: skip
        r = data[name]
        rows.append(
            f"| {name} | {clients} | {r['rps']:.0f} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | "
            f"{r['upstream_calls']} | {r['requests_per_upstream_call']:.1f} | {r['errors']} | "
            f"{r['rate_limited']} |"
        )
    return "\n".join([
        "# Micro-batching one-input embedding requests", "",
        (f"{data['stamp']['date']} on {data['stamp']['machine']}; simulator latency "
         f"{data['simulator']['latency']}; max_wait_ms {data['max_wait_ms']}; "
         f"{data['seconds']} s per run, closed loop, gateway + simulator + clients in one "
         "process; base64 vectors of 256 dimensions, as the OpenAI SDK asks by default."),
        "", *rows, "",
        (f"- requests/s with / without: **{data['rps_ratio']:.2f}x**; upstream calls "
         f"{data['upstream_calls_ratio']:.3f}x"),
        (f"- against a 1,200 RPM key: requests/s with / without "
         f"**{data['limited_rps_ratio']:.2f}x**"),
        (f"- a lone client pays p50 {data['lone_p50_added_ms']:+.1f} ms, p99 "
         f"{data['lone_p99_added_ms']:+.1f} ms for the wait"), "",
    ])  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--wait-ms", type=float, default=3.0)
    add_output_options(parser)
    args = parser.parse_args()
    out = Output.of(args)
    if args.smoke:
        args.clients, args.seconds = 4, 0.4
    result = asyncio.run(main(clients=args.clients, seconds=args.seconds, wait_ms=args.wait_ms))
    out.write("microbatch", result, markdown(result))
