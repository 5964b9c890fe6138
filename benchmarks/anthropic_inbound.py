"""What the Anthropic inbound costs, as ratios inside one run.

1. The plain OpenAI chat path before/after this branch (the Context `extensions` field and the
   one attribute test in OpenAIUpstream): `benchmarks/inprocess_cpu.py` run alternately on a
   baseline tree and this one (`--baseline /work/main/src`), gateway CPU per request.
2. `/v1/messages` against `/v1/chat/completions` for the same question, in-process against the
   simulator: the translation both ways, whole and streamed.

    python benchmarks/anthropic_inbound.py [--baseline PATH] [--requests 1500] [--rounds 3]
    python benchmarks/anthropic_inbound.py --smoke    # tiny: this tree against itself
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
from harness import ROOT, Output, add_output_options, stamp

from levergate import Gateway, Settings
from levergate.server.transport import GatewayTransport
from levergate.simulator import SimSettings, run_simulator

HERE = Path(__file__).resolve().parent
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 16}
MESSAGES = {"model": "m", "messages": [{"role": "user", "content": "hello there"}],
            "max_tokens": 16}  # fmt: skip
_LINE = re.compile(r"stream ([\d.]+) us/request, whole ([\d.]+) us/request")


def openai_path(tree: str, requests: int) -> tuple[float, float]:
    env = {**os.environ, "PYTHONPATH": tree}
    out = subprocess.run(
        [sys.executable, str(HERE / "inprocess_cpu.py"), "--requests", str(requests),
         "--rounds", "1"],
        env=env, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    found = _LINE.search(out)
    if found is None:
        raise RuntimeError(out)
    return float(found[1]), float(found[2])


async def per_request(path: str, body: dict[str, object], requests: int) -> float:
    async with (
        run_simulator(SimSettings(port=0)) as sim,
        Gateway(Settings.for_upstream(sim.base_url)) as gateway,
        httpx.AsyncClient(transport=GatewayTransport(gateway), base_url="http://levergate") as http,
    ):
        for _ in range(min(300, requests)):  # warm-up
            await (await http.post(path, json=body)).aread()
        started = time.process_time()
        for _ in range(requests):
            await (await http.post(path, json=body)).aread()
        return (time.process_time() - started) / requests * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--baseline", default="/work/main/src")
    parser.add_argument("--requests", type=int, default=1500)
    parser.add_argument("--rounds", type=int, default=3)
    add_output_options(parser)
    args = parser.parse_args()
    out = Output.of(args)
    mine = str(ROOT / "src")
    if args.smoke:
        args.baseline, args.requests, args.rounds = mine, 20, 1
    base: list[tuple[float, float]] = []
    branch: list[tuple[float, float]] = []
    for _ in range(args.rounds):
        base.append(openai_path(args.baseline, args.requests))
        branch.append(openai_path(mine, args.requests))
    ab = {
        kind: statistics.median(b[i] for b in branch) / statistics.median(b[i] for b in base)
        for i, kind in enumerate(("stream", "whole"))
    }
    protocol: dict[str, float] = {}
    for stream in (False, True):
        kind = "stream" if stream else "whole"
        chat = [asyncio.run(per_request("/v1/chat/completions", {**CHAT, "stream": stream},
                                        args.requests)) for _ in range(args.rounds)]  # fmt: skip
        anth = [asyncio.run(per_request("/v1/messages", {**MESSAGES, "stream": stream},
                                        args.requests)) for _ in range(args.rounds)]  # fmt: skip
        protocol[f"{kind}_chat_us"] = statistics.median(chat)
        protocol[f"{kind}_messages_us"] = statistics.median(anth)
        protocol[f"{kind}_ratio"] = statistics.median(anth) / statistics.median(chat)
    data = {**stamp(), "requests": args.requests, "rounds": args.rounds, "openai_ab": ab,
            "baseline_us": base, "branch_us": branch, "protocol": protocol}  # fmt: skip
    md = (
        f"# Anthropic inbound cost ({data['date']}, {data['machine']})\n\n"
        "CPU per request in-process against the simulator (gateway + simulator + client), "
        f"median of {args.rounds} rounds of {args.requests}.\n\n"
        "| measure | whole | stream |\n|---|---|---|\n"
        f"| OpenAI chat path, this branch / baseline | {ab['whole']:.3f}x | {ab['stream']:.3f}x |\n"
        f"| /v1/chat/completions (us) | {protocol['whole_chat_us']:.0f} | "
        f"{protocol['stream_chat_us']:.0f} |\n"
        f"| /v1/messages (us) | {protocol['whole_messages_us']:.0f} | "
        f"{protocol['stream_messages_us']:.0f} |\n"
        f"| /v1/messages / chat | {protocol['whole_ratio']:.2f}x | "
        f"{protocol['stream_ratio']:.2f}x |\n"
    )
    out.write("anthropic_inbound", data, md)


if __name__ == "__main__":
    main()
