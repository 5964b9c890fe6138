"""Shared plumbing of the traffic benchmarks: processes on loopback, a minimal HTTP client that
counts what a caller sees, and the simulator's control endpoints.

Each benchmark runs the real thing: `levergate sim` and `levergate serve` as separate processes
(or the simulator in-process where its arrival log is needed), a client in this process.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from harness import stop, wait_port

from levergate.bench.stats import percentile

LEVERGATE = str(Path(sys.executable).parent / "levergate")


@contextlib.contextmanager
def process(
    args: Sequence[str], *, port: int, config: dict[str, Any], workdir: Path
) -> Iterator[subprocess.Popen[bytes]]:
    """A `levergate <args> --config <yaml> --port <port>` child process for the block."""
    path = workdir / f"{args[0]}-{port}.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    log = (workdir / f"{args[0]}-{port}.log").open("w")
    child = subprocess.Popen(  # the benchmark starts its own servers on loopback
        [LEVERGATE, *args, "--config", str(path), "--port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_port(port, proc=child)
        yield child
    finally:
        stop(child)
        log.close()


@dataclass(slots=True)
class Outcome:
    """One request as its caller saw it."""

    issued: float
    finished: float
    ok: bool
    client_429s: int = 0
    attempts: int = 1


def chat_body(index: int, *, max_tokens: int) -> dict[str, Any]:
    return {
        "model": "sim-small",
        "messages": [{"role": "user", "content": f"Independent prompt number {index}."}],
        "max_tokens": max_tokens,
    }


async def post_chat(
    session: aiohttp.ClientSession, url: str, body: dict[str, Any], *, key: str
) -> tuple[int, dict[str, str]]:
    async with session.post(
        f"{url}/chat/completions", json=body, headers={"authorization": f"Bearer {key}"}
    ) as response:
        await response.read()
        return response.status, {k.lower(): v for k, v in response.headers.items()}


async def control(url: str, method: str, path: str, body: Any = None) -> Any:
    """The simulator's control API (`/sim/stats`, `/sim/reset`, `/sim/config`)."""
    root = url.removesuffix("/v1")
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, f"{root}{path}", json=body) as response,
    ):
        return json.loads(await response.read() or b"null")


def summarize(outcomes: Sequence[Outcome], *, skip: float, scale: float) -> dict[str, Any]:
    """Goodput per (scaled) minute over the steady part of the run — completions after the first
    `skip` seconds, when a fresh provider window no longer hands out its one-off burst — and
    latency percentiles of every request, scaled back to the uncompressed timeline."""
    start = min(o.issued for o in outcomes)
    done = sorted(o.finished - start for o in outcomes if o.ok)
    end = done[-1] if done else 0.0
    steady = [t for t in done if t >= skip]
    span = end - skip
    per_minute = len(steady) / span * 60.0 / scale if span > 0 and steady else 0.0
    latencies = sorted((o.finished - o.issued) * scale for o in outcomes if o.ok)
    return {
        "requests": len(outcomes),
        "succeeded": sum(o.ok for o in outcomes),
        "goodput_per_min": round(per_minute, 1),
        "p50_s": round(percentile(latencies, 50), 3) if latencies else None,
        "p99_s": round(percentile(latencies, 99), 3) if latencies else None,
        "client_429s": sum(o.client_429s for o in outcomes),
        "makespan_s": round(end * scale, 1),
    }


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process so far (Linux /proc), to tell a CPU-bound run."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def sleep_until(moment: float) -> None:
    delay = moment - time.perf_counter()
    if delay > 0:
        await asyncio.sleep(delay)


async def _serve_logged(port: int, limit: int, window: float) -> list[tuple[float, int]]:
    """A simulator whose every chat arrival is stamped with the system-wide monotonic clock
    (comparable across processes), until the process is told to stop."""
    import signal

    from levergate.simulator import SimSettings, run_simulator

    arrivals: list[tuple[float, int]] = []
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    settings = SimSettings(
        latency={"ttft_ms": 20.0}, limits={"rpm": limit, "window_seconds": window}
    )
    async with run_simulator(settings, port=port) as sim:
        original = sim.simulator.handle

        def logged(*, method: str, path: str, headers: Any, body: bytes) -> Any:
            reply = original(method=method, path=path, headers=headers, body=body)
            if path.startswith("/v1/chat"):
                arrivals.append((time.monotonic(), reply.status))
            return reply

        sim.simulator.handle = logged  # type: ignore[method-assign]
        await stop.wait()
    return arrivals


@contextlib.contextmanager
def logged_simulator(
    *, port: int, limit: int, window: float, workdir: Path
) -> Iterator[list[tuple[float, int]]]:
    """Run `_serve_logged` in a child process; the list fills with (time, status) on exit."""
    log = workdir / f"arrivals-{port}.log"
    child = subprocess.Popen(  # the benchmark's own simulator on loopback
        [sys.executable, __file__, str(port), str(limit), str(window), str(log)]
    )
    arrivals: list[tuple[float, int]] = []
    try:
        wait_port(port)
        yield arrivals
    finally:
        stop(child, seconds=30)
        for line in log.read_text().splitlines() if log.exists() else []:
            stamp, status = line.split()
            arrivals.append((float(stamp), int(status)))


if __name__ == "__main__":
    logged = asyncio.run(_serve_logged(int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])))
    Path(sys.argv[4]).write_text("\n".join(f"{t:.6f} {s}" for t, s in logged))
