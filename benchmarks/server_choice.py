"""Which HTTP server and which upstream client should carry the proxy? Measured, not assumed.

Starts a fixed-answer upstream, then for each candidate (server x client) starts the gateway
proxying every model to it, drives it with wrk (closed loop, 16 and 64 connections) and reads the
gateway process's CPU time from /proc. Also measures the upstream directly in the same run, so
every number is a ratio against the same baseline.
Writes benchmarks/results/server_choice.{json,md}.

    .venv/bin/python benchmarks/server_choice.py [--seconds 5] [--smoke]

granian is a candidate only when installed (`pip install -e '.[bench]'`); otherwise it is
skipped with a note.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
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

PY = sys.executable
BODY = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hello there"}]})
ANSWER = (
    b'{"id":"x","object":"chat.completion","created":0,"model":"m","choices":[{"index":0,'
    b'"message":{"role":"assistant","content":"Hello"},"finish_reason":"stop"}],'
    b'"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}'
)

UPSTREAM = f"""
import asyncio, uvloop
ANSWER = {ANSWER!r}
HEAD = (b"HTTP/1.1 200 OK\\r\\ncontent-type: application/json\\r\\n"
        b"content-length: %d\\r\\n\\r\\n" % len(ANSWER))
class P(asyncio.Protocol):
    def connection_made(self, t): self.t = t; self.buf = b""
    def data_received(self, d):
        self.buf += d
        while True:
            h = self.buf.find(b"\\r\\n\\r\\n")
            if h < 0: return
            m = __import__("re").search(rb"content-length: *(\\d+)", self.buf[:h], 2)
            n = int(m.group(1)) if m else 0
            if len(self.buf) < h + 4 + n: return
            self.buf = self.buf[h + 4 + n:]
            self.t.write(HEAD + ANSWER)
async def main(port):
    s = await asyncio.get_running_loop().create_server(P, "127.0.0.1", port, backlog=4096)
    await s.serve_forever()
uvloop.run(main(int(__import__("sys").argv[1])))
"""

GATEWAY = """
import os
from functools import partial
from levergate import Deps, Gateway, Settings
from levergate.server.asgi import App
from levergate.upstreams.client import AiohttpClient, HttpxClient
from levergate.upstreams.h1 import H1Client
clients = {"h1": H1Client, "aiohttp": AiohttpClient, "httpx": partial(HttpxClient, http2=False)}
settings = Settings.for_upstream(os.environ["BENCH_UPSTREAM"])
deps = Deps(http_client=clients[os.environ["BENCH_CLIENT"]])
app = App(Gateway(settings, deps=deps))
"""


def tree(pid: int) -> list[int]:
    out = subprocess.run(
        ["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True, check=False
    )
    return [pid, *(p for c in out.stdout.split() for p in tree(int(c)))]


def wrk(url: str, connections: int, seconds: int, lua: Path) -> dict[str, float]:
    out = subprocess.run(
        ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--latency", "-s", str(lua), url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    total = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    p50 = re.search(r"50%\s+([\d.]+)(\w+)", out)
    scale = {"us": 1e-3, "ms": 1.0, "s": 1e3}
    return {
        "rps": rps,
        "requests": total,
        "p50_ms": float(p50.group(1)) * scale[p50.group(2)] if p50 else -1,
    }


CANDIDATES = {
    "uvicorn+httptools+uvloop / levergate h1 client": ("uvicorn", "h1"),
    "uvicorn+httptools+uvloop / aiohttp client": ("uvicorn", "aiohttp"),
    "uvicorn+httptools+uvloop / httpx client": ("uvicorn", "httpx"),
    "granian (asgi, uvloop) / levergate h1 client": ("granian", "h1"),
}


def server_command(server: str, port: int) -> list[str]:
    if server == "uvicorn":
        return [PY, "-m", "uvicorn", "gw_app:app", "--port", str(port), "--loop", "uvloop",
                "--http", "httptools", "--no-access-log", "--log-level", "warning"]  # fmt: skip
    return [PY, "-m", "granian", "--interface", "asgi", "--loop", "uvloop", "--port", str(port),
            "--workers", "1", "--log-level", "warning", "gw_app:app"]  # fmt: skip


def measure(name: str, server: str, client: str, *, base: str, tmp: Path, lua: Path,
            seconds: int, connections: tuple[int, ...]) -> list[dict[str, object]]:  # fmt: skip
    """wrk at 16 and 64 connections through one candidate, with the gateway's own CPU."""
    port = free_port()
    env = {**os.environ, "BENCH_UPSTREAM": base, "BENCH_PORT": str(port),
           "BENCH_CLIENT": client, "PYTHONPATH": str(tmp)}  # fmt: skip
    proc = subprocess.Popen(server_command(server, port), env=env, cwd=tmp)
    rows: list[dict[str, object]] = []
    try:
        wait_port(port)
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        wrk(url, 16, 1, lua)  # warm-up
        for conns in connections:
            pids = tree(proc.pid)
            before = cpu_seconds(*pids)
            result = wrk(url, conns, seconds, lua)
            used = cpu_seconds(*pids) - before
            cpu_ms = 1000 * used / result["requests"]
            rows.append({"candidate": name, "connections": conns, **result,
                         "gateway_cpu_ms_per_request": cpu_ms})  # fmt: skip
    finally:
        stop(proc)
    return rows


def write_report(rows: list[dict[str, Any]], out: Output) -> None:
    meta = stamp()
    lines = [
        f"# Server and client choice ({meta['date']}, {meta['machine']})",
        "",
        "wrk closed loop against a fixed-answer upstream; CPU is the gateway process's own.",
        "",
        "| candidate | connections | req/s | p50 ms | gateway CPU ms/request |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['candidate']} | {r['connections']} | {r['rps']:.0f} | {r['p50_ms']:.2f} | "
        f"{r['gateway_cpu_ms_per_request']:.3f} |"
        for r in rows
    ]
    out.write("server_choice", {**meta, "rows": rows}, "\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=5)
    add_output_options(parser)
    args = parser.parse_args()
    out = Output.of(args)
    need_tool("wrk")
    candidates, connections = CANDIDATES, (16, 64)
    if args.smoke:  # one second, one candidate, one load
        first = next(iter(CANDIDATES))
        candidates, connections, args.seconds = {first: CANDIDATES[first]}, (16,), 1
    tmp = Path(tempfile.mkdtemp())
    lua = tmp / "post.lua"
    lua.write_text(
        'wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
        f"wrk.body = {json.dumps(BODY)}\n"
    )
    (tmp / "gw_app.py").write_text(GATEWAY)
    up_port = free_port()
    upstream = subprocess.Popen([PY, "-c", UPSTREAM, str(up_port)])
    wait_port(up_port)
    base = f"http://127.0.0.1:{up_port}/v1"
    rows: list[dict[str, Any]] = []
    try:
        for conns in connections:
            direct = wrk(base + "/chat/completions", conns, args.seconds, lua)
            rows.append({"candidate": "direct (no gateway)", "connections": conns, **direct,
                         "gateway_cpu_ms_per_request": 0.0})  # fmt: skip
        for name, (server, client) in candidates.items():
            if importlib.util.find_spec(server) is None:
                print(f"skipping {name}: {server} is not installed (pip install -e '.[bench]')")
                continue
            rows += measure(name, server, client, base=base, tmp=tmp, lua=lua,
                            seconds=args.seconds, connections=connections)  # fmt: skip
    finally:
        stop(upstream)
    write_report(rows, out)


if __name__ == "__main__":
    main()
