"""What do OpenTelemetry traces cost? CPU per request of the whole in-process path (httpx client,
gateway, simulator in one process, as `inprocess_cpu.py`) with `otel.endpoint` off and on, in
alternating rounds (each in its own child process) so both see the same machine at the same
moments. "on" exports every request's span and its attempt's child over OTLP/HTTP to a receiver
in another process (which answers 200 and drops them); the exporter's thread and the gateway's
close (which flushes the queue) are inside the measured CPU.

    python benchmarks/otel_ab.py [--rounds 4] [--requests 3000]
    python benchmarks/otel_ab.py --smoke

Writes benchmarks/results/otel_ab.{json,md}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
from harness import Output, add_output_options, free_port, stamp, stop, wait_port

BODY = {"model": "m", "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 16}


async def cpu_per_request(requests: int, *, stream: bool, endpoint: str | None) -> float:
    """Microseconds of this process's CPU per request (client + gateway + simulator + export)."""
    from levergate.app import build_gateway
    from levergate.config import Settings
    from levergate.server.transport import GatewayTransport
    from levergate.simulator import SimSettings, run_simulator

    async with run_simulator(SimSettings(port=0)) as sim:
        otel = {"endpoint": endpoint} if endpoint else {}
        settings = Settings.for_upstream(sim.base_url, otel=otel)
        gateway = build_gateway(settings)
        async with gateway, httpx.AsyncClient(
            transport=GatewayTransport(gateway), base_url="http://levergate/v1"
        ) as http:  # fmt: skip
            body = {**BODY, "stream": stream}
            for _ in range(min(300, requests)):  # warm-up
                await (await http.post("/chat/completions", json=body)).aread()
            started = time.process_time()
            for _ in range(requests):
                await (await http.post("/chat/completions", json=body)).aread()
        return (time.process_time() - started) / requests * 1e6  # the close's flush included


class _Drop(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_: Any) -> None:
        return


def child(requests: int, endpoint: str | None) -> None:
    result = {
        "stream": asyncio.run(cpu_per_request(requests, stream=True, endpoint=endpoint)),
        "whole": asyncio.run(cpu_per_request(requests, stream=False, endpoint=endpoint)),
    }
    print(json.dumps(result))


def run_child(requests: int, endpoint: str | None) -> dict[str, float]:
    argv = [sys.executable, __file__, "--child", "--requests", str(requests)]
    if endpoint:
        argv += ["--endpoint", endpoint]
    out = subprocess.run(argv, check=True, capture_output=True, text=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--child", action="store_true")
    parser.add_argument("--receiver", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--endpoint", default=None)
    add_output_options(parser)
    args = parser.parse_args()
    if args.receiver:
        ThreadingHTTPServer(("127.0.0.1", args.receiver), _Drop).serve_forever()
    if args.child:
        child(args.requests, args.endpoint)
        return
    out = Output.of(args)
    if args.smoke:
        args.rounds, args.requests = 1, 50
    port = free_port()
    receiver = subprocess.Popen([sys.executable, __file__, "--receiver", str(port)])
    try:
        wait_port(port)
        runs: dict[str, list[dict[str, float]]] = {"off": [], "on": []}
        for _ in range(args.rounds):
            runs["off"].append(run_child(args.requests, None))
            runs["on"].append(run_child(args.requests, f"http://127.0.0.1:{port}"))
    finally:
        stop(receiver)
    report(runs, args, out)


def report(runs: dict[str, list[dict[str, float]]], args: argparse.Namespace, out: Output) -> None:
    data: dict[str, Any] = {**stamp(), "rounds": args.rounds, "requests": args.requests,
                            "runs": runs}  # fmt: skip
    rows = []
    for what in ("stream", "whole"):
        off = statistics.median(r[what] for r in runs["off"])
        on = statistics.median(r[what] for r in runs["on"])
        data[what] = {"off_us": off, "on_us": on, "ratio": on / off}
        spread = ", ".join(f"{r[what]:.0f}" for r in runs["off"]), ", ".join(
            f"{r[what]:.0f}" for r in runs["on"])  # fmt: skip
        rows.append(
            f"| {what} | {off:.1f} | {on:.1f} | {on / off:.3f} | {spread[0]} / {spread[1]} |"
        )
    markdown = (
        f"# OpenTelemetry traces A/B ({data['date']}, {data['machine']})\n\n"
        f"`benchmarks/otel_ab.py --rounds {args.rounds} --requests {args.requests}`: CPU "
        "microseconds per request of the in-process path (client, gateway and simulator in one "
        "process), medians of alternating rounds, `otel.endpoint` off vs on (every request "
        "traced and exported to a receiver in another process).\n\n"
        "| path | off us/req | on us/req | on / off | rounds off / on |\n|---|---|---|---|---|\n"
        + "\n".join(rows) + "\n"
    )  # fmt: skip
    out.write("otel_ab", data, markdown)


if __name__ == "__main__":
    main()
