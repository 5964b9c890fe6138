"""A learned route under load: requests per second and latency through the gateway, with the
routing embedder's onnxruntime threads spinning between runs (the default) and not
(`routing.embeddings.spin: false`), in one run, alternating.

A router is trained (as `levergate router train` does) on 1,500 rows of RouteLLM's MMLU file
(../shared/data, read at run time) and serves `model="auto"` in front of the simulator at zero
latency, so the gateway's own CPU — the route decision above all — is what is measured. Closed
loop: N clients each send MMLU prompts one after the other; the exact cache is off.

    PYTHONPATH=src python benchmarks/routing_load.py [--seconds 6] [--rounds 2] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from harness import Output, add_output_options, data_file, stamp

from levergate.config import RoutingSettings, Settings
from levergate.gateway import Gateway
from levergate.routing.labels import read_labels
from levergate.routing.model import Models
from levergate.routing.train import Options, embedder, features, spec_for, train
from levergate.server.run import serving
from levergate.simulator import SimSettings, run_simulator

FILE = "routellm/mmlu_mixtral_vs_gpt4_dev.csv"
MODELS = [{"name": "mini", "upstream": "default", "upstream_model": "mixtral_8x7b"},
          {"name": "big", "upstream": "default", "upstream_model": "gpt4_1106"}]  # fmt: skip
CLIENTS = (1, 16)


def trained_router(folder: Path, *, rows: int = 1500) -> tuple[Path, list[str]]:
    """A router file trained on `rows` MMLU rows, and 2,000 other rows' prompts to send."""
    labels = read_labels(data_file(FILE))
    order = np.random.default_rng(0).permutation(len(labels))
    fit_rows = labels.subset(order[:rows])
    settings = RoutingSettings().embeddings
    embed = embedder(settings)
    spec = spec_for(settings, dimensions=384)
    x = features(fit_rows.prompts, embed=embed, text_chars=spec.text_chars)
    router = train(fit_rows, x=x, spec=spec, models=Models(cheap="mixtral_8x7b",
                   strong="gpt4_1106"), options=Options(folds=3))  # fmt: skip
    path = folder / "router.json"
    router.save(path)
    return path, [labels.prompts[i] for i in order[rows : rows + 2000]]


async def closed_loop(
    url: str, prompts: list[str], *, clients: int, seconds: float
) -> dict[str, Any]:
    latencies: list[float] = []
    stop = time.perf_counter() + seconds

    async def client(n: int, http: httpx.AsyncClient) -> None:
        i = n
        while i == n or time.perf_counter() < stop:  # at least one request each
            text = prompts[i % len(prompts)]
            body = {"model": "auto", "max_tokens": 4,
                    "messages": [{"role": "user", "content": text}]}  # fmt: skip
            started = time.perf_counter()
            reply = await http.post("/chat/completions", json=body)
            reply.raise_for_status()
            latencies.append(time.perf_counter() - started)
            i += clients

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=30.0) as http:
        began = time.perf_counter()
        await asyncio.gather(*[client(n, http) for n in range(clients)])
        elapsed = time.perf_counter() - began
    return {"requests": len(latencies), "rps": len(latencies) / elapsed,
            "p50_ms": 1000 * statistics.median(latencies),
            "p99_ms": 1000 * float(np.percentile(latencies, 99))}  # fmt: skip


async def one_run(router: Path, prompts: list[str], *, spin: bool, clients: int,
                  seconds: float) -> dict[str, Any]:  # fmt: skip
    learned = {"file": str(router), "cheap": "mini", "strong": "big"}
    routing = {"routes": [{"name": "auto", "default": "big", "learned": learned}],
               "embeddings": {"spin": spin}}  # fmt: skip
    async with run_simulator(SimSettings(port=0)) as sim:
        settings = Settings.for_upstream(sim.base_url, server={"port": 0}, models=MODELS,
                                         routing=routing, cache={"enabled": False})  # fmt: skip
        async with Gateway(settings) as gateway, serving(gateway) as url:
            await closed_loop(url, prompts[:20], clients=1, seconds=min(0.5, seconds))  # warm
            return await closed_loop(url, prompts, clients=clients, seconds=seconds)


async def main(
    *, seconds: float, rounds: int, rows: int, levels: tuple[int, ...] = CLIENTS
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        router, prompts = trained_router(Path(folder), rows=rows)
        runs: dict[str, list[dict[str, Any]]] = {}
        for clients in levels:
            for _ in range(rounds):
                for spin in (True, False):
                    r = await one_run(router, prompts, spin=spin, clients=clients,
                                      seconds=seconds)  # fmt: skip
                    runs.setdefault(f"{clients}:{spin}", []).append(r)
    return {"stamp": stamp(), "seconds": seconds, "rounds": rounds, "runs": runs,
            "clients": list(levels),
            "load": " ".join(f"{v:.1f}" for v in os.getloadavg())}  # fmt: skip


def markdown(d: dict[str, Any]) -> str:
    lines = [
        "# A learned route under load: the embedder's threads spinning or not", "",
        (f"{d['stamp']['date']} on {d['stamp']['machine']}; gateway, simulator (zero latency) "
         f"and clients in one process; {d['seconds']:.0f} s per run, {d['rounds']} rounds "
         f'alternating; `model="auto"` routed by a router trained on 1,500 MMLU rows '
         f"(load average after: {d['load']})."), "",
        "| clients | spin | requests/s | p50 ms | p99 ms |", "|---:|---|---:|---:|---:|",
    ]  # fmt: skip
    median = {}
    for key, runs in d["runs"].items():
        clients, spin = key.split(":")
        rps = statistics.median(r["rps"] for r in runs)
        p50 = statistics.median(r["p50_ms"] for r in runs)
        p99 = statistics.median(r["p99_ms"] for r in runs)
        median[key] = (rps, p50)
        lines.append(f"| {clients} | {spin} | {rps:.0f} | {p50:.2f} | {p99:.2f} |")
    lines.append("")
    for clients in d["clients"]:
        on, off = median[f"{clients}:True"], median[f"{clients}:False"]
        lines.append(f"- {clients} client(s): requests/s without spinning / with "
                     f"**{off[0] / on[0]:.2f}x**, p50 {off[1] - on[1]:+.2f} ms")  # fmt: skip
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--rounds", type=int, default=2)
    add_output_options(parser)
    args = parser.parse_args()
    out = Output.of(args)
    rows, levels = 1500, CLIENTS
    if args.smoke:
        args.seconds, args.rounds, rows, levels = 0.3, 1, 200, (4,)
    data = asyncio.run(main(seconds=args.seconds, rounds=args.rounds, rows=rows, levels=levels))
    out.write("routing_load", data, markdown(data))
