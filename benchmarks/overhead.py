"""What does levergate cost? Direct to the simulator vs through levergate, in one run.

Starts `levergate sim` (0 ms and 50 ms time-to-first-token) and `levergate serve --upstream` in
front of it as separate processes, then for concurrency 1, 16 and 64, streaming and not, runs the
same closed-loop load (levergate's own load generator) against the simulator directly and through
the gateway, back to back. Reports the latency the gateway adds (p50, p99, TTFT) and the gateway
process's CPU per request read from /proc. A last step measures peak throughput at 64
connections with wrk (a C load generator, so the client is not the bottleneck).

Writes benchmarks/results/overhead.json and overhead.md.

    .venv/bin/python benchmarks/overhead.py [--seconds 4] [--quick | --smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import (
    Output,
    add_output_options,
    cpu_seconds,
    free_port,
    need_tool,
    stamp,
    stop,
    wait_port,
)

from levergate.bench import BenchConfig, run_bench

ROOT = Path(__file__).resolve().parent.parent
LEVERGATE = [sys.executable, "-m", "levergate.cli.main"]
RELAY = [sys.executable, str(ROOT / "benchmarks" / "relay.py")]


@contextmanager
def process(
    args: list[str], port: int, env: dict[str, str] | None = None, *, command: list[str] = LEVERGATE
) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(
        [*command, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        env={**os.environ, **(env or {})},
    )  # fmt: skip
    try:
        try:
            wait_port(port, proc=proc)
        except RuntimeError:
            if proc.poll() is None:
                raise
            raise RuntimeError(f"{args[0]} did not start: {proc.stderr.read()!r}") from None  # type: ignore[union-attr]
        yield proc
    finally:
        stop(proc, seconds=15)


async def load(url: str, *, concurrency: int, stream: bool, seconds: float) -> dict[str, Any]:
    config = BenchConfig(
        url=url, concurrency=concurrency, duration_s=seconds, stream=stream,
        prompt_tokens=64, max_tokens=16, model="sim-small",
    )  # fmt: skip
    result = await run_bench(config)
    return result.to_dict()


def measure_pair(
    sim_url: str,
    gw_url: str,
    gw_pid: int,
    *,
    concurrency: int,
    stream: bool,
    seconds: float,
    relay_url: str | None = None,
) -> dict[str, Any]:
    warm = min(0.5, seconds)
    asyncio.run(load(gw_url, concurrency=concurrency, stream=stream, seconds=warm))
    direct = asyncio.run(load(sim_url, concurrency=concurrency, stream=stream, seconds=seconds))
    relayed = None
    if relay_url is not None:
        asyncio.run(load(relay_url, concurrency=concurrency, stream=stream, seconds=warm))
        relayed = asyncio.run(
            load(relay_url, concurrency=concurrency, stream=stream, seconds=seconds)
        )
    before = cpu_seconds(gw_pid)
    via = asyncio.run(load(gw_url, concurrency=concurrency, stream=stream, seconds=seconds))
    used = cpu_seconds(gw_pid) - before
    key = "ttft_ms" if stream else "total_ms"
    nan = float("nan")
    d, v = direct[key], via[key]
    return {
        "concurrency": concurrency,
        "stream": stream,
        "direct_rps": direct["throughput_rps"],
        "levergate_rps": via["throughput_rps"],
        "direct_p50_ms": d.get("p50", nan),
        "levergate_p50_ms": v.get("p50", nan),
        "added_p50_ms": v.get("p50", nan) - d.get("p50", nan),
        "direct_p99_ms": d.get("p99", nan),
        "levergate_p99_ms": v.get("p99", nan),
        "added_p99_ms": v.get("p99", nan) - d.get("p99", nan),
        "metric": "TTFT (first generated token)" if stream else "total",
        "errors": {"direct": direct["errors"], "levergate": via["errors"]},
        "gateway_cpu_ms_per_request": 1000 * used / max(1, via["completed"]),
        # The null proxy (benchmarks/relay.py): what the extra process hop alone adds.
        "relay_added_p50_ms": (
            relayed[key].get("p50", nan) - d.get("p50", nan) if relayed is not None else None
        ),
    }


def wrk_throughput(url: str, seconds: int, pid: int | None) -> dict[str, float]:
    lua = Path(tempfile.mkdtemp()) / "post.lua"
    body = json.dumps({"model": "sim-small", "max_tokens": 16,
                       "messages": [{"role": "user", "content": "hello " * 60}]})  # fmt: skip
    lua.write_text(f'wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
                   f"wrk.body = {json.dumps(body)}\n")  # fmt: skip
    before = cpu_seconds(pid) if pid else 0.0
    out = subprocess.run(
        ["wrk", "-t1", "-c64", f"-d{seconds}s", "-s", str(lua), url + "/chat/completions"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    used = cpu_seconds(pid) - before if pid else 0.0
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    total = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {"rps": rps, "non_2xx": int(errors.group(1)) if errors else 0,
            "gateway_cpu_ms_per_request": 1000 * used / max(1, total)}  # fmt: skip


def socket_ttft(port: int, *, requests: int) -> float:
    """p50 ms from sending a streamed request to the arrival of the bytes that hold its first
    generated token, read from a plain socket: what the server adds, without the client's own
    response handling (an HTTP client parses the head on the way to the first token, and a
    gateway that answers a stream's head with its first event puts that parsing after the
    upstream's wait instead of during it)."""
    times = []
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(requests):
            question = {"role": "user", "content": f"q{i} {time.time()}"}
            body = json.dumps(
                {"model": "sim-small", "stream": True, "max_tokens": 4, "messages": [question]}
            )
            sock.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n"
                b"content-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                % (len(body), body.encode())
            )
            started, received, first = time.perf_counter(), b"", None
            while not received.endswith(b"0\r\n\r\n"):
                received += sock.recv(65536)
                if first is None and b'"content":"' in received.replace(b'"content":""', b""):
                    first = time.perf_counter() - started
            times.append(1000 * (first or float("nan")))
    return statistics.median(times[3:] or times)


def socket_ttfts(targets: dict[str, int], *, rounds: int, requests: int) -> dict[str, float]:
    """Median over alternating rounds, so every target sees the same machine."""
    seen: dict[str, list[float]] = {name: [] for name in targets}
    for _ in range(rounds):
        for name, port in targets.items():
            seen[name].append(socket_ttft(port, requests=requests))
    return {name: statistics.median(values) for name, values in seen.items()}


@dataclass(frozen=True)
class Plan:
    """How much of everything one run measures."""

    seconds: float
    latencies: tuple[int, ...] = (0, 50)
    concurrency: tuple[int, ...] = (1, 16, 64)
    socket_rounds: int = 4
    socket_requests: int = 40

    @classmethod
    def of(cls, args: argparse.Namespace) -> Plan:
        if args.smoke:
            return cls(0.3, latencies=(0,), concurrency=(1,), socket_rounds=1, socket_requests=5)
        if args.quick:
            return cls(1.5, concurrency=(1, 16), socket_rounds=2, socket_requests=20)
        return cls(args.seconds)


def run(plan: Plan, pin: bool) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    throughput: dict[str, Any] = {}
    at_socket: dict[str, dict[str, float]] = {}
    seconds = plan.seconds
    for latency_ms in plan.latencies:
        sim_port, gw_port = free_port(), free_port()
        sim_args = ["sim", "--port", str(sim_port), "--ttft-ms", str(latency_ms)]
        sim_url = f"http://127.0.0.1:{sim_port}/v1"
        gw_args = ["serve", "--upstream", sim_url, "--port", str(gw_port)]
        gw_url = f"http://127.0.0.1:{gw_port}/v1"
        # --pin: the gateway on CPU 0 (its own `server.cpus`); this load generator, wrk and the
        # simulator (which inherit this process's affinity) on CPU 1.
        gw_env = {"LEVERGATE_SERVER__CPUS": "[0]"} if pin else None
        relay_port = free_port()
        relay_args = ["--port", str(relay_port), "--to", f"127.0.0.1:{sim_port}"]
        relay_url = f"http://127.0.0.1:{relay_port}/v1"
        with (
            process(sim_args, sim_port),
            process(gw_args, gw_port, gw_env) as gateway,
            process(relay_args, relay_port, command=RELAY),
        ):
            for concurrency in plan.concurrency:
                for stream in (False, True):
                    relay = relay_url if concurrency == 1 else None
                    row = measure_pair(sim_url, gw_url, gateway.pid, concurrency=concurrency,
                                       stream=stream, seconds=seconds, relay_url=relay)  # fmt: skip
                    rows.append({"upstream_latency_ms": latency_ms, **row})
                    print(json.dumps(rows[-1]), flush=True)
            targets = {"direct": sim_port, "relay": relay_port, "levergate": gw_port}
            at_socket[f"{latency_ms} ms"] = socket_ttfts(
                targets, rounds=plan.socket_rounds, requests=plan.socket_requests
            )
            if latency_ms == 0:
                secs = 1 if seconds < 1 else max(2, int(seconds))  # a smoke run: 1 s
                throughput = {
                    "direct": wrk_throughput(sim_url, secs, None),
                    "levergate": wrk_throughput(gw_url, secs, gateway.pid),
                }
    return {"rows": rows, "throughput_c64_0ms": throughput, "socket_ttft_c1": at_socket}


def markdown(data: dict[str, Any]) -> str:
    lines = [
        f"# Gateway overhead ({data['date']}, {data['machine']})", "",
        ("Pinned: the gateway on CPU 0 (`server.cpus`), simulator and load generators on CPU 1."
         if data.get("pinned") else "Unpinned: the scheduler places every process."), "",
        ("Closed loop, 64-token prompts, 16 output tokens; direct = straight to `levergate sim`, "
        "levergate = through `levergate serve --upstream` with its default layers. Added = "
        "levergate minus direct, measured back to back in one run. Null relay: a process that "
        "only copies bytes between the sockets (benchmarks/relay.py), the floor for any proxy "
        "that is a process of its own; measured at concurrency 1."), "",
        ("| upstream latency | concurrency | mode | direct p50 ms | levergate p50 ms "
         "| added p50 ms | added p99 ms | null relay added p50 ms | direct req/s "
         "| levergate req/s | gateway CPU ms/req |"),
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for r in data["rows"]:
        mode = "stream (TTFT)" if r["stream"] else "non-stream (total)"
        lines.append(
            f"| {r['upstream_latency_ms']} ms | {r['concurrency']} | {mode} | "
            f"{r['direct_p50_ms']:.2f} | {r['levergate_p50_ms']:.2f} | {r['added_p50_ms']:.2f} | "
            f"{r['added_p99_ms']:.2f} | {_ms(r.get('relay_added_p50_ms'))} | "
            f"{r['direct_rps']:.0f} | {r['levergate_rps']:.0f} | "
            f"{r['gateway_cpu_ms_per_request']:.3f} |"
        )
    sockets = data.get("socket_ttft_c1")
    if sockets:
        lines += ["", ("TTFT at the socket, concurrency 1 (a plain-socket client: time to the "
                       "bytes holding the first generated token, p50 ms, median of alternating "
                       "rounds):"),
                  "", "| upstream latency | direct | null relay | levergate | levergate added |",
                  "|---|---|---|---|---|"]  # fmt: skip
        for latency, t in sockets.items():
            added = t["levergate"] - t["direct"]
            lines.append(f"| {latency} | {t['direct']:.2f} | {t['relay']:.2f} | "
                         f"{t['levergate']:.2f} | {added:.2f} |")  # fmt: skip
    t = data.get("throughput_c64_0ms")
    if t:
        lines += ["", "Peak throughput, wrk, 64 connections, 0 ms upstream, non-stream:", "",
                  "| target | req/s | non-2xx | gateway CPU ms/req |", "|---|---|---|---|",
                  f"| direct | {t['direct']['rps']:.0f} | {t['direct']['non_2xx']} | - |",
                  (f"| levergate | {t['levergate']['rps']:.0f} | {t['levergate']['non_2xx']} | "
                  f"{t['levergate']['gateway_cpu_ms_per_request']:.3f} |")]  # fmt: skip
    return "\n".join(lines) + "\n"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--quick", action="store_true", help="fewer, shorter runs")
    parser.add_argument(
        "--pin", action="store_true", help="gateway on CPU 0, simulator and load on CPU 1"
    )
    add_output_options(parser)
    args = parser.parse_args()
    out = Output.of(args)
    need_tool("wrk")
    if args.pin:
        os.sched_setaffinity(0, {1})
    data = {**stamp(), "pinned": args.pin, **run(Plan.of(args), args.pin)}
    suffix = ("-pinned" if args.pin else "") + ("-quick" if args.quick else "")
    out.write(f"overhead{suffix}", data, markdown(data))


if __name__ == "__main__":
    main()
