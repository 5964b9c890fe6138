"""What scrubbing secrets out of 200 answers costs (levergate/redact_answers.py), in-process:
the official client path (`httpx` over `GatewayTransport`) against the simulator, as
`inprocess_cpu.py` runs it, with the upstream given a key. On a shared host a run-to-run
comparison of two checkouts drifts by more than this costs, so the same gateway alternates
between its upstream scrubbing and not scrubbing (the scrubber switched off on the live
upstream between blocks) and reports the median of the blocks' CPU ratios.

    PYTHONPATH=src python benchmarks/scrub_cpu.py [--blocks 20] [--requests 300]

Writes results/scrub_cpu.{json,md}.
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

BODY = {"model": "m", "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 16}
KEY = "sk-proj-" + "a1B2c3D4e5F6g7H8i9J0" * 2


async def block(http: httpx.AsyncClient, requests: int, *, stream: bool) -> float:
    """Microseconds of this process's CPU per request."""
    body = {**BODY, "stream": stream}
    started = time.process_time()
    for _ in range(requests):
        await (await http.post("/chat/completions", json=body)).aread()
    return (time.process_time() - started) / requests * 1e6


async def measure(blocks: int, requests: int) -> dict[str, Any]:
    found: dict[str, Any] = {}
    async with run_simulator(SimSettings(port=0)) as sim:
        config = Settings.load(upstreams=[{"name": "sim", "base_url": sim.base_url,
                                           "api_key": KEY}],
                               models=[{"name": "*", "upstream": "sim"}])  # fmt: skip
        async with (
            Gateway(config) as gateway,
            httpx.AsyncClient(transport=GatewayTransport(gateway), base_url="http://lg/v1") as http,
        ):
            upstream = gateway.pipeline.upstreams["sim"]
            scrubber = upstream._scrub  # type: ignore[attr-defined]
            for stream in (True, False):
                await block(http, 300, stream=stream)  # warm-up
                on, off = [], []
                for n in range(blocks):  # alternating which goes first
                    for scrubbing in (True, False) if n % 2 else (False, True):
                        upstream._scrub = scrubber if scrubbing else None  # type: ignore[attr-defined]
                        (on if scrubbing else off).append(
                            await block(http, requests, stream=stream)
                        )
                ratios = [a / b for a, b in zip(on, off, strict=True)]
                found["stream" if stream else "whole"] = {
                    "on_us": statistics.median(on), "off_us": statistics.median(off),
                    "ratio_median": statistics.median(ratios),
                    "ratio_quartiles": statistics.quantiles(ratios, n=4),
                }  # fmt: skip
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--blocks", type=int, default=20)
    parser.add_argument("--requests", type=int, default=300)
    add_output_options(parser)
    args = parser.parse_args()
    out = Output.of(args)
    if args.smoke:
        args.blocks, args.requests = 2, 10
    found = asyncio.run(measure(args.blocks, args.requests))
    rows = "\n".join(
        f"| {kind} | {r['off_us']:.1f} | {r['on_us']:.1f} | {r['ratio_median']:.3f} "
        f"({r['ratio_quartiles'][0]:.3f}-{r['ratio_quartiles'][2]:.3f}) |"
        for kind, r in found.items()
    )
    out.write("scrub_cpu", {**stamp(), "blocks": args.blocks, "requests": args.requests,
                                **found}, (
        f"# Scrubbing secrets out of answers: CPU per request\n\n{stamp()['date']}, "
        f"{stamp()['machine']}; {args.blocks} alternating blocks of {args.requests} requests "
        "each way, an upstream with a key, 16-token answers.\n\n"
        "| answer | not scrubbed (us) | scrubbed (us) | ratio, median of blocks (quartiles) |\n"
        f"|---|---:|---:|---:|\n{rows}\n"
    ))  # fmt: skip


if __name__ == "__main__":
    main()
