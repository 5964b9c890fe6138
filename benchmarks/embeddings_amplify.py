"""Embeddings amplification (issue 20, item 6): what four slow clients asking for large
embeddings answers cost another client's chat requests, through a real `levergate serve` (the
embeddings cache on, as by default) in front of `levergate sim` (1,536 dimensions).

Three phases of `--seconds` each, one chat client timing its requests in all three:

- solo: the chat client alone (the baseline of this run);
- copies: four clients each sending 2,048 copies of "a" (10 KB; the cache sends one input
  upstream and answered with 2,048 full vectors, 66.7 MB), reading the answer at ~3 MB/s for
  2 s, then hanging up and asking again;
- distinct: the same with 2,048 distinct short inputs, all in the cache after the first
  request (an answer the upstream would send too: not amplified, but as large).

    PYTHONPATH=src python benchmarks/embeddings_amplify.py [--seconds 10] [--name NAME]

Writes results/<name>.{json,md}: the chat client's p50/p99 in each phase (ratios to solo), what
the slow clients got (status, bytes), and the gateway's peak and final RSS.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import orjson
import yaml
from harness import Output, add_output_options, free_port, stamp, stop, wait_port

LEVERGATE = [sys.executable, "-m", "levergate.cli.main"]
SLOW_CLIENTS = 4
READ_BYTES, READ_PAUSE = 64 * 1024, 0.02  # ~3 MB/s per slow client
HOLD_SECONDS = 2.0  # then it hangs up and asks again
INPUTS = 2048  # per embeddings request (a smoke run's: 128, a 4 MB answer)


def memory(pid: int) -> dict[str, int]:
    """The process's resident and peak resident set, in MiB."""
    found = {}
    for row in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = row.partition(":")
        if name in ("VmRSS", "VmHWM"):
            found[name] = int(value.split()[0]) // 1024
    return found


async def chat_client(port: int, seconds: float) -> list[float]:
    body = {"model": "sim-small", "max_tokens": 1,
            "messages": [{"role": "user", "content": "hello"}]}  # fmt: skip
    took: list[float] = []
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}/v1", timeout=60) as http:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            started = time.perf_counter()
            answer = await http.post("/chat/completions", json=body)
            took.append(time.perf_counter() - started)
            answer.raise_for_status()
    return took


async def slow_client(port: int, payload: bytes, until: float, seen: Counter[str]) -> None:
    """Send the request again and again, reading each answer slowly, until `until`."""
    head = ("POST /v1/embeddings HTTP/1.1\r\nhost: 127.0.0.1\r\n"
            "content-type: application/json\r\nconnection: close\r\n"
            f"content-length: {len(payload)}\r\n\r\n").encode()  # fmt: skip
    while time.perf_counter() < until:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(head + payload)
            status = (await reader.readline()).split(b" ")[1].decode()
            got = 0
            hang_up = min(until, time.perf_counter() + HOLD_SECONDS)
            while time.perf_counter() < hang_up and (chunk := await reader.read(READ_BYTES)):
                got += len(chunk)
                await asyncio.sleep(READ_PAUSE)
            seen[f"status {status}"] += 1
            seen["bytes"] = max(seen["bytes"], got)
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
        await asyncio.sleep(READ_PAUSE)  # a slow client, not a flood


async def phase(port: int, seconds: float, payload: bytes | None) -> dict[str, Any]:
    seen: Counter[str] = Counter()
    until = time.perf_counter() + seconds
    slow = [asyncio.create_task(slow_client(port, payload, until, seen))
            for _ in range(SLOW_CLIENTS if payload else 0)]  # fmt: skip
    took = await chat_client(port, seconds)
    await asyncio.gather(*slow)
    ms = sorted(t * 1000 for t in took)
    return {"chat_requests": len(ms), "chat_p50_ms": round(statistics.median(ms), 2),
            "chat_p99_ms": round(ms[int(0.99 * (len(ms) - 1))], 2),
            "slow_clients": dict(seen)}  # fmt: skip


def run(seconds: float, tmp: Path, *, inputs: int = INPUTS) -> dict[str, Any]:
    sim_port, port = free_port(), free_port()
    sim = subprocess.Popen([*LEVERGATE, "sim", "--port", str(sim_port)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    config = tmp / "gateway.yaml"
    config.write_text(yaml.safe_dump({
        "server": {"port": port},
        "upstreams": [{"name": "sim", "base_url": f"http://127.0.0.1:{sim_port}/v1"}],
        "models": [{"name": "*", "upstream": "sim"}],
    }))  # fmt: skip
    gateway = subprocess.Popen([*LEVERGATE, "serve", "--config", str(config)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        wait_port(sim_port, proc=sim)
        wait_port(port, proc=gateway)
        copies = orjson.dumps({"model": "text-embedding-3-small", "input": ["a"] * inputs})
        distinct = orjson.dumps({"model": "text-embedding-3-small",
                                 "input": [f"a{i}" for i in range(inputs)]})  # fmt: skip
        result: dict[str, Any] = {"request_bytes": {"copies": len(copies),
                                                    "distinct": len(distinct)}}  # fmt: skip
        # The distinct inputs in the cache first: the phase measures answering, not the upstream.
        httpx.post(f"http://127.0.0.1:{port}/v1/embeddings", content=distinct, timeout=120,
                   headers={"content-type": "application/json"}).raise_for_status()  # fmt: skip
        result["solo"] = asyncio.run(phase(port, seconds, None))
        result["start_mib"] = memory(gateway.pid)
        for name, payload in (("copies", copies), ("distinct", distinct)):
            result[name] = asyncio.run(phase(port, seconds, payload))
            result[name]["p50_vs_solo"] = round(result[name]["chat_p50_ms"]
                                                / result["solo"]["chat_p50_ms"], 1)  # fmt: skip
            result[name]["p99_vs_solo"] = round(result[name]["chat_p99_ms"]
                                                / result["solo"]["chat_p99_ms"], 1)  # fmt: skip
            result[name]["gateway_mib"] = memory(gateway.pid)
        return result
    finally:
        stop(gateway)
        stop(sim)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--name", default="embeddings_amplify")
    add_output_options(parser)
    args = parser.parse_args()
    out = Output.of(args)
    inputs = INPUTS
    if args.smoke:
        args.seconds, inputs = 1.0, 128
    result = {**stamp(), "inputs": inputs, **run(args.seconds, Path(tempfile.mkdtemp()),
                                                  inputs=inputs)}  # fmt: skip
    rows = [
        f"| {name} | {r['chat_requests']} | {r['chat_p50_ms']} | {r['chat_p99_ms']} | "
        f"{r.get('p50_vs_solo', 1.0)}x / {r.get('p99_vs_solo', 1.0)}x | "
        f"{r['slow_clients'] or '-'} | {r.get('gateway_mib', result['start_mib'])} |"
        for name, r in ((n, result[n]) for n in ("solo", "copies", "distinct"))
    ]
    lines = [
        f"# Embeddings amplification ({result['date']}, {result['machine']})",
        "",
        (
            f"A chat client's latency while {SLOW_CLIENTS} clients ask for {inputs:,}-input "
            f"embeddings answers, each read at ~3 MB/s for {HOLD_SECONDS:g} s before asking "
            f"again ({args.seconds:g} s a phase; "
            f"requests of {result['request_bytes']['copies']} bytes of copies of 'a' and "
            f"{result['request_bytes']['distinct']} bytes of distinct inputs, those already "
            "in the cache)."
        ),
        "",
        (
            "| phase | chat requests | p50 ms | p99 ms | vs solo (p50 / p99) | slow clients got "
            "| gateway MiB (RSS, peak) |"
        ),
        "|---|---|---|---|---|---|---|",
        *rows,
    ]
    out.write(args.name, result, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
