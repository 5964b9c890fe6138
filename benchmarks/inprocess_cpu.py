"""Gateway CPU per request in-process: the official client path (`httpx` over
`GatewayTransport`) against the simulator on the same event loop, stream and whole, after a
warm-up. One process, no sockets between client and gateway, so it shows what the pipeline's
own code costs; run it on two checkouts (PYTHONPATH=<tree>/src) back to back to compare them.

    python benchmarks/inprocess_cpu.py [--requests 3000] [--rounds 3] [--api-key KEY]
                                       [--request-log FILE]

`--api-key` gives the upstream a key, as every hosted deployment has: then the answers are
scanned for it (levergate/redact_answers.py); without one nothing is scanned. `--request-log`
turns the request log on into that SQLite file; the CPU measured then includes the gateway's
close, which writes what is still queued (`log_ab.py` alternates it off and on).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import httpx

from levergate import Settings
from levergate.app import build_gateway
from levergate.server.transport import GatewayTransport
from levergate.simulator import SimSettings, run_simulator

BODY = {"model": "m", "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 16}


def settings(base_url: str, api_key: str | None, request_log: str | None = None) -> Settings:
    log = {"enabled": True, "store": {"sqlite_path": request_log}} if request_log else {}
    if api_key is None:
        return Settings.for_upstream(base_url, request_log=log)
    return Settings.load(upstreams=[{"name": "sim", "base_url": base_url, "api_key": api_key}],
                         models=[{"name": "*", "upstream": "sim"}], request_log=log)  # fmt: skip


@contextlib.asynccontextmanager
async def served(
    make: Callable[[str], Settings], body: Mapping[str, Any], *, warmup: int = 300
) -> AsyncIterator[Callable[[], Awaitable[None]]]:
    """The in-process path: the simulator, a gateway on it with the settings `make` gives for
    its base URL, httpx over `GatewayTransport`; `warmup` requests of `body` served first, then
    yields what serves one more. Leaving closes the gateway (the request log writes what is
    still queued, the exporter exports): time across it to count that."""
    async with run_simulator(SimSettings(port=0)) as sim:
        gateway = build_gateway(make(sim.base_url))
        async with gateway, httpx.AsyncClient(
            transport=GatewayTransport(gateway), base_url="http://levergate/v1"
        ) as http:  # fmt: skip

            async def one() -> None:
                await (await http.post("/chat/completions", json=body)).aread()

            for _ in range(warmup):
                await one()
            yield one


async def cpu_per_request(
    requests: int, *, stream: bool, api_key: str | None = None, request_log: str | None = None
) -> float:
    """Microseconds of this process's CPU per request (gateway + simulator + client), the
    gateway's close included (with the request log on, it writes what is still queued)."""
    make = functools.partial(settings, api_key=api_key, request_log=request_log)
    async with served(make, {**BODY, "stream": stream}, warmup=min(300, requests)) as one:
        started = time.process_time()
        for _ in range(requests):
            await one()
    return (time.process_time() - started) / requests * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--request-log", default=None, help="the request log on, in this file")
    args = parser.parse_args()
    for _ in range(args.rounds):
        stream, whole = (
            asyncio.run(cpu_per_request(args.requests, stream=s, api_key=args.api_key,
                                        request_log=args.request_log))
            for s in (True, False)
        )  # fmt: skip
        print(f"stream {stream:.1f} us/request, whole {whole:.1f} us/request")


if __name__ == "__main__":
    main()
