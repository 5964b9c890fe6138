"""System calls and answer heads of an exact-cache hit against the simulator's own answer
(issue 22 §3: a hit <= 1.5x a client's round trip to the simulator). Counts, not timings: the
kernel's share of a request is in no instruction count (callgrind counts user space only).

`strace -f -c` is attached to every thread of the server after the warm-up (so start-up is not
counted) while one keep-alive connection sends the same request (temperature 0) `--requests`
times, to `levergate serve --upstream` (each one an exact-cache hit) and to `levergate sim`
(each one answered); one more `levergate sim`, not traced, is serve's upstream. The table is
system calls a request by name, and the bytes of one answer's head and body as the client reads
them. A call with no per-request share (accept, a timer's tick during the run) shows as a
fraction; a call another thread makes (a futex: a thread woken) shows in the count too.

    .venv/bin/python benchmarks/hit_syscalls.py [--requests 2000] [--warmup 200]
        [--baseline OTHER/src --baseline-name NAME]   # another tree's serve beside this one

Writes benchmarks/results/hit_syscalls.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness import (
    Output,
    add_output_options,
    free_port,
    need_tool,
    read_response,
    stamp,
    wait_port,
)  # fmt: skip

LEVERGATE = [sys.executable, "-m", "levergate.cli.main"]
SAME = {"model": "sim-small", "max_tokens": 16, "temperature": 0,
        "messages": [{"role": "user", "content": "the same question"}]}  # fmt: skip
SETTLE = 1.0  # seconds for strace to attach to every thread before the counted requests


def ask(port: int, requests: int) -> tuple[bytes, bytes]:
    """`requests` times `SAME` on one connection; the last answer's head and body."""
    body = json.dumps(SAME).encode()
    request = (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json"
               b"\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))  # fmt: skip
    head = rest = b""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        for _ in range(requests):
            sock.sendall(request)
            head, rest = read_response(sock)
    return head + b"\r\n\r\n", rest


def parse(summary: str) -> dict[str, int]:
    """strace -c's table: calls by system call."""
    calls: dict[str, int] = {}
    for line in summary.splitlines():
        parts = line.split()
        if len(parts) >= 5 and parts[0][0].isdigit() and parts[-1] != "total":
            calls[parts[-1]] = int(parts[3])
    return calls


def traced(command: list[str], *, env: dict[str, str], requests: int, warmup: int,
           folder: Path, name: str) -> dict[str, Any]:  # fmt: skip
    port = free_port()
    proc = subprocess.Popen([*command, "--port", str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    out = folder / f"{name}.strace"
    try:
        wait_port(port, seconds=120, proc=proc)
        ask(port, warmup)
        strace = subprocess.Popen([need_tool("strace"), "-f", "-c", "-o", str(out), "-p",
                                   str(proc.pid)], stderr=subprocess.DEVNULL)  # fmt: skip
        time.sleep(SETTLE)
        head, body = ask(port, requests)
        strace.send_signal(signal.SIGINT)
        strace.wait(timeout=60)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    calls = parse(out.read_text())
    return {"name": name, "calls": {k: v / requests for k, v in calls.items()},
            "total": sum(calls.values()) / requests, "head": head.decode("latin-1"),
            "head_bytes": len(head), "body_bytes": len(body)}  # fmt: skip


def markdown(data: dict[str, Any]) -> str:
    rows = data["rows"]
    names = sorted({k for r in rows for k in r["calls"]},
                   key=lambda k: -max(r["calls"].get(k, 0) for r in rows))  # fmt: skip
    lines = [
        f"# System calls of an exact-cache hit ({data['date']}, {data['machine']})", "",
        ("`benchmarks/hit_syscalls.py`: `strace -f -c` attached to every thread of the server "
         f"after {data['warmup']} warm-up requests, {data['requests']} counted; one keep-alive "
         "connection sends the same request (temperature 0): to `levergate serve --upstream` "
         "each is an exact-cache hit, to `levergate sim` (0 ms) each is answered. System calls "
         "a request; below 0.05 a request is a timer's tick or the connection's own."), "",
        "| system call | " + " | ".join(r["name"] for r in rows) + " |",
        "|---|" + "---:|" * len(rows),
    ]  # fmt: skip
    shown = [n for n in names if max(r["calls"].get(n, 0) for r in rows) >= 0.05]
    lines += [f"| {n} | " + " | ".join(f"{r['calls'].get(n, 0):.2f}" for r in rows) + " |"
              for n in shown]  # fmt: skip
    lines.append("| **total** | " + " | ".join(f"**{r['total']:.2f}**" for r in rows) + " |")
    lines += ["", "| answer | head bytes | body bytes |", "|---|---:|---:|"]
    lines += [f"| {r['name']} | {r['head_bytes']} | {r['body_bytes']} |" for r in rows]
    for r in rows:
        lines += ["", f"{r['name']}'s head:", "", "```", r["head"].rstrip(), "```"]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--baseline", type=Path, help="another tree's src/, served beside")
    parser.add_argument("--baseline-name", default="baseline")
    add_output_options(parser)
    args = parser.parse_args()
    if args.smoke:
        args.requests, args.warmup = 20, 5
    output = Output.of(args)
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    sim_port = free_port()
    sim = subprocess.Popen(
        [*LEVERGATE, "sim", "--port", str(sim_port), "--ttft-ms", "0"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    serve = [*LEVERGATE, "serve", "--upstream", f"http://127.0.0.1:{sim_port}/v1"]
    targets = [("simulator", [*LEVERGATE, "sim", "--ttft-ms", "0"], env),
               ("levergate hit", serve, env)]  # fmt: skip
    if args.baseline:
        targets.append((f"{args.baseline_name} hit", serve,
                        {**env, "PYTHONPATH": str(args.baseline)}))  # fmt: skip
    try:
        wait_port(sim_port, seconds=120, proc=sim)
        with tempfile.TemporaryDirectory() as folder:
            rows = [traced(command, env=e, requests=args.requests, warmup=args.warmup,
                           folder=Path(folder), name=name)
                    for name, command, e in targets]  # fmt: skip
    finally:
        sim.send_signal(signal.SIGTERM)
        sim.wait(timeout=60)
    data = {**stamp(), "requests": args.requests, "warmup": args.warmup, "rows": rows}
    output.write("hit_syscalls", data, markdown(data))


if __name__ == "__main__":
    main()
