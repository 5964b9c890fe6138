"""What the Responses API costs the gateway, in-process: CPU per request of `/v1/responses`
translated to chat completions and passed through natively, against `/v1/chat/completions`
for the same prompt, whole and streamed, all in one process (httpx over `GatewayTransport`,
the simulator on the same loop) after a warm-up. Ratios to the chat route, within one run.

    python benchmarks/responses_cpu.py [--requests 1500] [--rounds 3] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

import httpx
from harness import Output, add_output_options, stamp

from levergate import Gateway, Settings
from levergate.server.transport import GatewayTransport
from levergate.simulator import SimSettings, run_simulator

PROMPT = "hello there, tell me something"
CASES: dict[str, tuple[str, str, dict[str, Any]]] = {
    "chat": ("translate", "/chat/completions",
             {"messages": [{"role": "user", "content": PROMPT}], "max_tokens": 16}),
    "responses translated": ("translate", "/responses",
                             {"input": PROMPT, "max_output_tokens": 16, "store": True}),
    "responses native": ("native", "/responses",
                         {"input": PROMPT, "max_output_tokens": 16, "store": True}),
}  # fmt: skip


async def cpu_per_request(case: str, requests: int, *, stream: bool) -> float:
    """Microseconds of this process's CPU per request (gateway + simulator + client)."""
    way, path, extra = CASES[case]
    async with run_simulator(SimSettings(port=0)) as sim:
        upstream = {"name": "sim", "base_url": sim.base_url, "responses": way}
        settings = Settings.load(upstreams=[upstream], models=[{"name": "*", "upstream": "sim"}])
        async with (
            Gateway(settings) as gateway,
            httpx.AsyncClient(transport=GatewayTransport(gateway), base_url="http://lg/v1") as http,
        ):
            body = {"model": "m", **extra, "stream": stream}
            for _ in range(min(200, requests)):  # warm-up
                await (await http.post(path, json=body)).aread()
            started = time.process_time()
            for _ in range(requests):
                response = await http.post(path, json=body)
                await response.aread()
                assert response.status_code == 200, response.text  # noqa: S101 - a benchmark
            return (time.process_time() - started) / requests * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=1500)
    parser.add_argument("--rounds", type=int, default=3)
    add_output_options(parser)
    args = parser.parse_args()
    out = Output.of(args)
    if args.smoke:
        args.requests, args.rounds = 10, 1
    runs: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        for stream in (False, True):
            for case in CASES:
                key = f"{case} ({'stream' if stream else 'whole'})"
                runs.setdefault(key, []).append(
                    asyncio.run(cpu_per_request(case, args.requests, stream=stream))
                )
    medians = {key: statistics.median(values) for key, values in runs.items()}
    lines = [
        "# Responses API: gateway CPU per request, in-process", "",
        (f"{stamp()['date']}, {stamp()['machine']}; {args.requests} requests x {args.rounds} "
         "rounds, median; process CPU of client + gateway + simulator."), "",
        "| case | us/request | vs chat |", "|---|---:|---:|",
    ]  # fmt: skip
    for key, value in medians.items():
        base = medians[f"chat ({'stream' if 'stream' in key else 'whole'})"]
        lines.append(f"| {key} | {value:.0f} | {value / base:.2f}x |")
    out.write(
        "responses_cpu",
        {**stamp(), "requests": args.requests, "rounds": args.rounds, "runs": runs,
         "median_us": medians},
        "\n".join(lines) + "\n",
    )  # fmt: skip


if __name__ == "__main__":
    main()
