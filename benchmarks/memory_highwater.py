"""Memory after large requests (issue 20, item 10): does the gateway give back what a burst of
large requests made it take? A real `levergate serve` in front of `levergate sim`, the default
settings (exact and embeddings caches in memory), four clients at once sending 6 MB chat bodies
and asking for 2,048-vector embeddings answers (67 MB each), then idle.

Variants, each in a fresh gateway process:

- no trim: `server.memory_trim_above_mib: 0`, glibc malloc as CPython uses it;
- no trim, arena-2: the same with `MALLOC_ARENA_MAX=2` (fewer malloc arenas, the usual advice
  for threaded servers);
- trim (the default): the gateway calls `malloc_trim(0)` when its resident memory grew by
  more than 64 MiB, looking every 5 s (server/memory.py);
- signal: no trim, and after the idle wait `malloc_trim(0)` is called once by hand (a signal
  handler this script's launcher installs): what glibc can hand back at all.

    PYTHONPATH=src python benchmarks/memory_highwater.py [--rounds 2] [--name NAME]

Writes results/<name>.{json,md}: resident memory before, at the peak, right after, after 8 s
idle, and (signal) after the one malloc_trim, in MiB.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import yaml
from harness import Output, add_output_options, free_port, stamp, stop, wait_port

# The gateway as `levergate serve`, with SIGUSR1 calling glibc's malloc_trim(0).
LAUNCH = (
    "import ctypes, signal, sys\n"
    "libc = ctypes.CDLL('libc.so.6')\n"
    "signal.signal(signal.SIGUSR1, lambda *_: libc.malloc_trim(0))\n"
    "from levergate.cli.main import main\n"
    "sys.argv = ['levergate', *sys.argv[1:]]\n"
    "main()\n"
)
CLIENTS = 4
JSON = "application/json"


def rss(pid: int) -> dict[str, int]:
    found = {}
    for row in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = row.partition(":")
        if name in ("VmRSS", "VmHWM"):
            found[name] = int(value.split()[0]) // 1024
    return found


@dataclass(frozen=True)
class Scale:
    inputs: int = 2048  # per embeddings request: a 67 MB answer
    words: int = 1_000_000  # per chat body: 6 MB
    idle_seconds: float = 8.0
    trim_seconds: float = 1.0  # after the signal, before reading memory again


SMOKE = Scale(inputs=16, words=5_000, idle_seconds=0.5, trim_seconds=0.2)


async def burst(port: int, rounds: int, scale: Scale) -> None:
    words = "words " * scale.words
    big_chat = orjson.dumps({"model": "sim-small", "max_tokens": 1,
                             "messages": [{"role": "user", "content": words}]})  # fmt: skip
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}/v1", timeout=120) as http:

        async def client(n: int) -> None:
            for r in range(rounds):
                texts = [f"client {n} round {r} text {i}" for i in range(scale.inputs)]
                answer = await http.post("/embeddings", json={
                    "model": "text-embedding-3-small", "input": texts})  # fmt: skip
                answer.raise_for_status()
                for _ in range(5):
                    sent = await http.post("/chat/completions", content=big_chat,
                                           headers={"content-type": JSON})  # fmt: skip
                    sent.raise_for_status()

        await asyncio.gather(*(client(n) for n in range(CLIENTS)))


VARIANTS = ("no trim", "no trim, arena-2", "trim (default)", "signal")


def variant(name: str, rounds: int, tmp: Path, scale: Scale, sim_port: int) -> dict[str, Any]:
    """One variant in a fresh gateway process, in front of the simulator at `sim_port`."""
    port = free_port()
    config = tmp / "gateway.yaml"
    trim = {} if name == "trim (default)" else {"memory_trim_above_mib": 0}
    config.write_text(yaml.safe_dump({
        "server": {"port": port, **trim},
        "upstreams": [{"name": "sim", "base_url": f"http://127.0.0.1:{sim_port}/v1"}],
        "models": [{"name": "*", "upstream": "sim"}],
    }))  # fmt: skip
    env = dict(os.environ)
    if name == "no trim, arena-2":
        env["MALLOC_ARENA_MAX"] = "2"
    gateway = subprocess.Popen([sys.executable, "-c", LAUNCH, "serve", "--config", str(config)],
                               env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        wait_port(port, proc=gateway)
        row: dict[str, Any] = {"before": rss(gateway.pid)["VmRSS"]}
        asyncio.run(burst(port, rounds, scale))
        after = rss(gateway.pid)
        row |= {"peak": after["VmHWM"], "after": after["VmRSS"]}
        time.sleep(scale.idle_seconds)
        row["idle"] = rss(gateway.pid)["VmRSS"]
        if name == "signal":
            gateway.send_signal(signal.SIGUSR1)
            time.sleep(scale.trim_seconds)
            row["after_malloc_trim"] = rss(gateway.pid)["VmRSS"]
        return row
    finally:
        stop(gateway)


def variants(rounds: int, tmp: Path, scale: Scale) -> dict[str, dict[str, Any]]:
    """Every variant, one after another, against one simulator (its memory is not measured)."""
    sim_port = free_port()
    sim = subprocess.Popen([sys.executable, "-m", "levergate.cli.main", "sim", "--port",
                            str(sim_port)], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        wait_port(sim_port, proc=sim)
        return {name: variant(name, rounds, tmp, scale, sim_port) for name in VARIANTS}
    finally:
        stop(sim)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--name", default="memory_highwater")
    add_output_options(parser)
    args = parser.parse_args()
    out = Output.of(args)
    scale = Scale()
    if args.smoke:
        args.rounds, scale = 1, SMOKE
    tmp = Path(tempfile.mkdtemp())
    rows = variants(args.rounds, tmp, scale)
    result = {**stamp(), "rounds": args.rounds, "clients": CLIENTS, "inputs": scale.inputs,
              "words": scale.words, "variants": rows}  # fmt: skip
    lines = [
        f"# Memory after large requests ({result['date']}, {result['machine']})",
        "",
        (
            f"{CLIENTS} clients x {args.rounds} rounds of one {scale.inputs:,}-input embeddings "
            f"answer and five chat bodies of {scale.words:,} words each, then idle; resident "
            "memory of the gateway in MiB."
        ),
        "",
        (
            f"| variant | before | peak | right after | after {scale.idle_seconds:g} s idle "
            "| after one malloc_trim(0) |"
        ),
        "|---|---|---|---|---|---|",
        *(
            f"| {name} | {r['before']} | {r['peak']} | {r['after']} | {r['idle']} | "
            f"{r.get('after_malloc_trim', '-')} |"
            for name, r in rows.items()
        ),
    ]
    out.write(args.name, result, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
