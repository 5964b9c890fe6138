"""Gateway CPU per request in-process: the official client path (`httpx` over
`Gateway.transport()`) against the simulator on the same event loop, stream and whole, after a
warm-up. One process, no sockets between client and gateway, so it shows what the pipeline's
own code costs; run it on two checkouts (PYTHONPATH=<tree>/src) back to back to compare them.

    python benchmarks/inprocess_cpu.py [--requests 3000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import time

import httpx

from levergate import Gateway, Settings
from levergate.upstreams.simulator import SimSettings, run_simulator

BODY = {"model": "m", "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 16}


async def cpu_per_request(requests: int, *, stream: bool) -> float:
    """Microseconds of this process's CPU per request (gateway + simulator + client)."""
    async with (
        run_simulator(SimSettings(port=0)) as sim,
        Gateway(Settings.for_upstream(sim.base_url)) as gateway,
        httpx.AsyncClient(transport=gateway.transport(), base_url="http://levergate/v1") as http,
    ):
        body = {**BODY, "stream": stream}
        for _ in range(300):
            await (await http.post("/chat/completions", json=body)).aread()
        started = time.process_time()
        for _ in range(requests):
            await (await http.post("/chat/completions", json=body)).aread()
        return (time.process_time() - started) / requests * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    for _ in range(args.rounds):
        stream = asyncio.run(cpu_per_request(args.requests, stream=True))
        whole = asyncio.run(cpu_per_request(args.requests, stream=False))
        print(f"stream {stream:.1f} us/request, whole {whole:.1f} us/request")


if __name__ == "__main__":
    main()
