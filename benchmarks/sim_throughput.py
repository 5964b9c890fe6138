"""Which HTTP server should carry the provider simulator? Measured, not guessed.

Every candidate serves the *same* `Simulator.handle` (the same JSON parsing, validation, word
generation and response shapes); only the HTTP layer differs:

    raw-protocol      asyncio.Protocol + httptools parser on uvloop (what `levergate sim` runs)
    raw-protocol-x2   the same, two worker processes on one port via SO_REUSEPORT
    uvicorn-asgi      uvicorn (httptools, uvloop) with a raw ASGI app, no framework
    granian-rsgi      granian (Rust HTTP server) with an RSGI app, one worker  [if installed]
    aiohttp-lowlevel  aiohttp's low-level `web.Server`, on uvloop

Load: wrk, closed loop, one thread, 64 keep-alive connections, small non-streaming chat
completions (16 output tokens), zero simulated latency. wrk and the server share this machine,
so the numbers are what one server gets while the load generator takes its share of the CPU.
(Open-loop wrk2 is not packaged here; this benchmark is about peak capacity, not latency.)

    python benchmarks/sim_throughput.py [--duration 5] [--connections 64] [--only NAME ...]
    python benchmarks/sim_throughput.py --smoke     # one second of one candidate

writes benchmarks/results/sim_throughput.json and .md. Needs `wrk` (apt-get install -y wrk).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness import Output, add_output_options, free_port, need_tool, stop, wait_http

from levergate.simulator import SimSettings, Simulator
from levergate.simulator.responses import Reply

CANDIDATES = ("raw-protocol", "raw-protocol-x2", "uvicorn-asgi", "granian-rsgi", "aiohttp-lowlevel")
TARGET = 10_000
BODY = {
    "model": "sim-small",
    "messages": [{"role": "user", "content": "Say hello to the benchmark."}],
    "max_tokens": 16,
}
LUA = """wrk.method = "POST"
wrk.body = '%s'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer sk-bench"
"""


# --- the alternative HTTP layers, each over the same Simulator ---------------------------------
def _reply_bytes(reply: Reply) -> tuple[list[tuple[str, str]], bytes]:
    """Headers and a complete body for servers that take the body in one piece."""
    headers = [("content-type", reply.content_type), ("x-simulated", "levergate-sim")]
    headers.extend(reply.headers)
    if reply.events is None:
        return headers, reply.body
    return headers, b"".join(reply.events)


class AsgiApp:
    def __init__(self, sim: Simulator) -> None:
        self.sim = sim

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        chunks = []
        more = True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        headers = {k.decode(): v.decode("latin-1") for k, v in scope["headers"]}
        path = scope["path"]
        reply = self.sim.handle(
            method=scope["method"], path=path, headers=headers, body=b"".join(chunks)
        )
        try:
            if reply.delay > 0:
                await asyncio.sleep(reply.delay)
            pairs, body = _reply_bytes(reply)
            raw = [(k.encode(), v.encode()) for k, v in pairs]
            await send({"type": "http.response.start", "status": reply.status, "headers": raw})
            await send({"type": "http.response.body", "body": body})
        finally:
            self.sim.finish(reply)


class RsgiApp:
    def __init__(self, sim: Simulator) -> None:
        self.sim = sim

    async def __rsgi__(self, scope: Any, protocol: Any) -> None:
        body = await protocol()
        headers = {name: scope.headers.get(name) for name in ("authorization", "x-sim-fault")}
        headers = {k: v for k, v in headers.items() if v is not None}
        reply = self.sim.handle(method=scope.method, path=scope.path, headers=headers, body=body)
        try:
            pairs, payload = _reply_bytes(reply)
            protocol.response_bytes(reply.status, pairs, payload)
        finally:
            self.sim.finish(reply)


def granian_app() -> RsgiApp:
    app = RsgiApp(Simulator(settings=SimSettings()))
    _freeze_heap()
    return app


def _freeze_heap() -> None:
    """What `levergate sim` does after start-up, so every candidate gets the same GC setup."""
    gc.collect()
    gc.freeze()


async def _serve_aiohttp(port: int) -> None:
    from aiohttp import web

    sim = Simulator(settings=SimSettings())

    async def handler(request: web.BaseRequest) -> web.Response:
        body = await request.read()
        headers = {k.lower(): v for k, v in request.headers.items()}
        reply = sim.handle(method=request.method, path=request.path_qs, headers=headers, body=body)
        try:
            pairs, payload = _reply_bytes(reply)
            return web.Response(status=reply.status, body=payload, headers=dict(pairs[1:]),
                                content_type=reply.content_type.split(";")[0])  # fmt: skip
        finally:
            sim.finish(reply)

    server = web.Server(handler, access_log=None)
    loop = asyncio.get_running_loop()
    await loop.create_server(server, "127.0.0.1", port, backlog=2048)
    _freeze_heap()
    await asyncio.Event().wait()


def serve_candidate(name: str, port: int) -> None:
    """Run one candidate in this process until killed."""
    import uvloop

    if name == "uvicorn-asgi":
        import uvicorn

        app = AsgiApp(Simulator(settings=SimSettings()))
        _freeze_heap()
        uvicorn.run(
            app, host="127.0.0.1", port=port, loop="uvloop", http="httptools", lifespan="off",
            access_log=False, log_level="warning", backlog=2048,
        )  # fmt: skip
    elif name == "aiohttp-lowlevel":
        uvloop.run(_serve_aiohttp(port))
    else:
        raise SystemExit(f"unknown candidate {name}")


# --- the harness --------------------------------------------------------------------------------
def _command(name: str, port: int) -> list[str] | None:
    py = sys.executable
    if name.startswith("raw-protocol"):
        workers = "2" if name.endswith("x2") else "1"
        return [
            py,
            "-m",
            "levergate.simulator",
            "--port",
            str(port),
            "--workers",
            workers,
        ]
    if name == "granian-rsgi":
        granian = Path(py).parent / "granian"
        if not granian.exists():
            return None
        return [
            str(granian), "--interface", "rsgi", "--host", "127.0.0.1", "--port", str(port),
            "--workers", "1", "--runtime-threads", "1", "--loop", "uvloop", "--http", "1",
            "--no-ws", "--log-level", "warning", "--factory",
            "--working-dir", str(Path(__file__).parent), "sim_throughput:granian_app",
        ]  # fmt: skip
    return [py, __file__, "--serve", name, "--port", str(port)]


def _cpu_seconds(root: int) -> float:
    """User + system CPU of a process and all its descendants (workers), from /proc."""
    ticks = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(entry.name)
        parents[pid] = int(fields[1])
        times[pid] = (int(fields[11]) + int(fields[12])) / ticks
    total, stack = 0.0, [root]
    while stack:
        pid = stack.pop()
        total += times.get(pid, 0.0)
        stack.extend(child for child, parent in parents.items() if parent == pid)
    return total


def _wrk(port: int, *, duration: int, connections: int, script: Path) -> dict[str, Any]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(
        ["wrk", "-t1", f"-c{connections}", f"-d{duration}s", "--latency", "-s", str(script),
         f"http://127.0.0.1:{port}/v1/chat/completions"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    total = re.search(r"(\d+) requests in", out)
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    errors = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    p50 = re.search(r"^\s+50%\s+(\S+)", out, re.MULTILINE)
    p99 = re.search(r"^\s+99%\s+(\S+)", out, re.MULTILINE)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    wrk_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {
        "wrk_cpu_share": round(wrk_cpu / duration, 2),
        "requests": int(total.group(1)) if total else 0,
        "requests_per_second": round(float(rps.group(1))) if rps else 0,
        "non_2xx": int(errors.group(1)) if errors else 0,
        "latency_p50": p50.group(1) if p50 else None,
        "latency_p99": p99.group(1) if p99 else None,
    }


def measure(name: str, *, duration: int, connections: int, script: Path) -> dict[str, Any]:
    """One run: start the candidate, warm it up, load it, and account its CPU time."""
    port = free_port()
    command = _command(name, port)
    if command is None:
        return {"candidate": name, "skipped": "not installed"}
    # The caller's path kept after this folder's: a checkout's own `src` wins over an install.
    paths = [str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/v1/chat/completions", data=json.dumps(BODY).encode())
        _wrk(port, duration=1, connections=connections, script=script)  # warm-up
        load = os.getloadavg()[0]
        cpu_before = _cpu_seconds(process.pid)
        result = _wrk(port, duration=duration, connections=connections, script=script)
        cpu = _cpu_seconds(process.pid) - cpu_before
    finally:
        stop(process)
    per_request = cpu / result["requests"] * 1e6 if result["requests"] else None
    return {
        "candidate": name,
        **result,
        "server_cpu_seconds": round(cpu, 2),
        "server_cpu_us_per_request": round(per_request, 1) if per_request else None,
        # Cores' worth of CPU the server got; below 1.0 per process it was not the bottleneck.
        "server_cpu_share": round(cpu / duration, 2),
        "loadavg_1m_before": round(load, 2),
    }


def summarise(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per candidate: best and median req/s over the rounds, and the median server CPU time per
    request, whose inverse is what one fully available core could serve."""
    summary = []
    for name in dict.fromkeys(run["candidate"] for run in runs):
        mine = [run for run in runs if run["candidate"] == name and "skipped" not in run]
        if not mine:
            summary.append({"candidate": name, "skipped": "not installed"})
            continue
        rates = [run["requests_per_second"] for run in mine]
        cpu = [run["server_cpu_us_per_request"] for run in mine if run["server_cpu_us_per_request"]]
        cpu_median = statistics.median(cpu) if cpu else None
        share = statistics.median(run["server_cpu_share"] for run in mine)
        wrk_share = statistics.median(run["wrk_cpu_share"] for run in mine)
        summary.append({
            "candidate": name,
            "best_rps": max(rates),
            "median_rps": round(statistics.median(rates)),
            "runs_rps": rates,
            "median_cpu_us_per_request": cpu_median,
            "rps_per_full_core": round(1e6 / cpu_median) if cpu_median else None,
            "median_server_cpu_share": share,
            "median_wrk_cpu_share": wrk_share,
            "non_2xx": sum(run["non_2xx"] for run in mine),
        })  # fmt: skip
    return summary


def write_results(
    runs: list[dict[str, Any]],
    summary: list[dict[str, Any]],
    *,
    duration: int,
    connections: int,
    out: Output,
) -> None:
    meta = {
        "benchmark": "sim_throughput",
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "load": f"wrk -t1 -c{connections} -d{duration}s, POST /v1/chat/completions "
        "(16 output tokens), zero simulated latency",
        "target_rps": TARGET,
        "summary": summary,
        "runs": runs,
    }
    lines = [
        "# Simulator throughput by HTTP server",
        "",
        (
            f"{meta['load']}. {meta['machine']['cpus']} CPUs shared by wrk, the server and "
            "whatever else runs (1-minute load average before each run is in the JSON). "
            f"Python {meta['machine']['python']}, {meta['when']}."
        ),
        "",
        (
            "`cpu us/req` is the server's own CPU time (user + system, all its processes) per "
            "request; `req/s per core` = 1e6 / that, the rate one fully available core would "
            "serve."
        ),
        "",
        (
            "| candidate | best req/s | median req/s | cpu us/req | req/s per core "
            "| server CPU (cores) | wrk CPU (cores) | non-2xx |"
        ),
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in summary:
        if "skipped" in row:
            lines.append(f"| {row['candidate']} | skipped ({row['skipped']}) | | | | | | |")
            continue
        lines.append(
            f"| {row['candidate']} | {row['best_rps']:,} | {row['median_rps']:,} | "
            f"{row['median_cpu_us_per_request']} | {row['rps_per_full_core'] or 0:,} | "
            f"{row['median_server_cpu_share']} | {row['median_wrk_cpu_share']} | {row['non_2xx']} |"
        )
    out.write("sim_throughput", meta, "\n".join(lines) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--duration", type=int, default=5, help="seconds per measured run")
    parser.add_argument("--rounds", type=int, default=3, help="runs per candidate, interleaved")
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--only", nargs="*", choices=CANDIDATES)
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    add_output_options(parser)
    args = parser.parse_args()
    if args.serve:
        serve_candidate(args.serve, args.port)
        return 0
    out = Output.of(args)
    need_tool("wrk")
    if args.smoke:
        args.duration, args.rounds, args.only = 1, 1, ["raw-protocol"]
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "post.lua"
        script.write_text(LUA % json.dumps(BODY))
        for _ in range(args.rounds):
            for name in args.only or CANDIDATES:
                run = measure(
                    name, duration=args.duration, connections=args.connections, script=script
                )
                print(json.dumps(run), flush=True)
                runs.append(run)
    summary = summarise(runs)
    write_results(runs, summary, duration=args.duration, connections=args.connections, out=out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
