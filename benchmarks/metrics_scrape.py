"""A `/metrics` scrape at the series cap (issue 20, item 10): what it costs another client's
chat requests, through a real `levergate serve` in front of `levergate sim`.

The series are filled first (500 label sets: 5 models x 100 features, `metrics.max_label_sets`),
then one chat client times its requests for `--seconds` alone and again while a scraper reads
`/metrics` back to back.

    PYTHONPATH=src python benchmarks/metrics_scrape.py [--seconds 10] [--name NAME]

Writes results/<name>.{json,md}: the chat client's p50/p99/max in both phases, the scrape's
size and time.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import yaml
from harness import Output, add_output_options, free_port, stamp, stop, wait_port

LEVERGATE = [sys.executable, "-m", "levergate.cli.main"]
CHAT = {"max_tokens": 1, "messages": [{"role": "user", "content": "hello"}]}


async def fill(http: httpx.AsyncClient) -> None:
    for model in range(5):
        for feature in range(100):
            answer = await http.post("/v1/chat/completions", json={**CHAT, "model": f"m{model}"},
                                     headers={"x-levergate-feature": f"f{feature}"})  # fmt: skip
            answer.raise_for_status()


async def chat(http: httpx.AsyncClient, seconds: float) -> list[float]:
    took: list[float] = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        started = time.perf_counter()
        (await http.post("/v1/chat/completions", json={**CHAT, "model": "m0"})).raise_for_status()
        took.append(time.perf_counter() - started)
    return took


async def scrape(http: httpx.AsyncClient, until: float, seen: list[tuple[float, int]]) -> None:
    while time.perf_counter() < until:
        started = time.perf_counter()
        text = (await http.get("/metrics")).content
        seen.append((time.perf_counter() - started, len(text)))


async def measure(port: int, seconds: float) -> dict[str, Any]:
    result: dict[str, Any] = {}
    async with (
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as http,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as scraper,
    ):
        await fill(http)
        for name in ("solo", "scraping"):
            scrapes: list[tuple[float, int]] = []
            until = time.perf_counter() + seconds
            task = asyncio.create_task(scrape(scraper, until, scrapes)) if name != "solo" else None
            ms = sorted(t * 1000 for t in await chat(http, seconds))
            if task is not None:
                await task
            row = {"chat_requests": len(ms), "p50_ms": round(statistics.median(ms), 2),
                   "p99_ms": round(ms[int(0.99 * (len(ms) - 1))], 2),
                   "max_ms": round(ms[-1], 2)}  # fmt: skip
            if scrapes:
                row["scrapes"] = len(scrapes)
                row["scrape_bytes"] = scrapes[-1][1]
                row["scrape_p50_ms"] = round(statistics.median(t for t, _ in scrapes) * 1000, 1)
            result[name] = row
    for key in ("p50_ms", "p99_ms", "max_ms"):
        result["scraping"][key.replace("_ms", "_vs_solo")] = round(
            result["scraping"][key] / result["solo"][key], 1
        )
    return result


def run(seconds: float, tmp: Path) -> dict[str, Any]:
    sim_port, port = free_port(), free_port()
    sim = subprocess.Popen([*LEVERGATE, "sim", "--port", str(sim_port)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    config = tmp / "gateway.yaml"
    config.write_text(yaml.safe_dump({
        "server": {"port": port},
        "upstreams": [{"name": "sim", "base_url": f"http://127.0.0.1:{sim_port}/v1"}],
        "models": [{"name": "*", "upstream": "sim"}],
        "cache": {"enabled": False},
    }))  # fmt: skip
    gateway = subprocess.Popen([*LEVERGATE, "serve", "--config", str(config)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        wait_port(sim_port, proc=sim)
        wait_port(port, proc=gateway)
        return asyncio.run(measure(port, seconds))
    finally:
        stop(gateway)
        stop(sim)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--name", default="metrics_scrape")
    add_output_options(parser)
    args = parser.parse_args()
    out = Output.of(args)
    if args.smoke:
        args.seconds = 1.0
    result = {**stamp(), **run(args.seconds, Path(tempfile.mkdtemp()))}
    solo, scraping = result["solo"], result["scraping"]
    lines = [
        f"# /metrics at the series cap ({result['date']}, {result['machine']})",
        "",
        (
            f"A chat client's latency alone and while a scraper reads /metrics back to back "
            f"({args.seconds:g} s each; 500 label sets filled first; /metrics "
            f"{scraping['scrape_bytes']} bytes, {scraping['scrape_p50_ms']} ms a scrape at p50, "
            f"{scraping['scrapes']} scrapes)."
        ),
        "",
        "| phase | chat requests | p50 ms | p99 ms | max ms |",
        "|---|---|---|---|---|",
        (
            f"| solo | {solo['chat_requests']} | {solo['p50_ms']} | {solo['p99_ms']} | "
            f"{solo['max_ms']} |"
        ),
        (
            f"| scraping | {scraping['chat_requests']} | {scraping['p50_ms']} "
            f"({scraping['p50_vs_solo']}x) | {scraping['p99_ms']} ({scraping['p99_vs_solo']}x) | "
            f"{scraping['max_ms']} ({scraping['max_vs_solo']}x) |"
        ),
    ]
    out.write(args.name, result, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
