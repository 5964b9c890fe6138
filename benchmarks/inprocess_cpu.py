"""Gateway CPU per request in-process: the official client path (`httpx` over
`GatewayTransport`) against the simulator on the same event loop, stream and whole, after a
warm-up. One process, no sockets between client and gateway, so it shows what the pipeline's
own code costs; run it on two checkouts (PYTHONPATH=<tree>/src) back to back to compare them.

    python benchmarks/inprocess_cpu.py [--requests 3000] [--rounds 3] [--api-key KEY]
                                       [--request-log FILE]

`--api-key` gives the upstream a key, as every hosted deployment has: then the answers are
scanned for it (levergate/redact_answers.py); without one nothing is scanned. `--request-log`
turns the request log on into that SQLite file (`log_ab.py` alternates it off and on).

The window is steady state: the warm-up (`WARMUP`, two of the request log's default batches)
ends with what the log and the span exporter hold written (`One.settle`), so that what a
process pays once (the log's connection, schema and statements compiled; the exporter's
connection) falls before it, and it ends with every one of its requests' records written and
spans exported, before the gateway's close (the store's last checkpoint, once a process).
Until 2026-12-05 the warm-up was 300 requests, under one batch: the first batch's write, with
its connection and statements (~7 ms, timed in place), and the close fell in a window of 3,000
requests, ~3 us of the log's ~18 us a request.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import httpx

from levergate import Settings
from levergate.app import build_gateway
from levergate.gateway import Gateway
from levergate.otel.extension import tracing_of
from levergate.requestlog.extension import log_of
from levergate.server.transport import GatewayTransport
from levergate.simulator import SimSettings, run_simulator

# Requests before the window: two of the request log's default batches (config/request_log.py).
WARMUP = 1000
BODY = {"model": "m", "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 16}


def settings(base_url: str, api_key: str | None, request_log: str | None = None) -> Settings:
    log = {"enabled": True, "store": {"sqlite_path": request_log}} if request_log else {}
    if api_key is None:
        return Settings.for_upstream(base_url, request_log=log)
    return Settings.load(upstreams=[{"name": "sim", "base_url": base_url, "api_key": api_key}],
                         models=[{"name": "*", "upstream": "sim"}], request_log=log)  # fmt: skip


class One:
    """Serves one more request (`await one()`); `await one.settle()` writes what the request log
    and the span exporter hold (nothing with both off)."""

    def __init__(self, http: httpx.AsyncClient, body: Mapping[str, Any], gateway: Gateway) -> None:
        self._http, self._body = http, body
        log, tracing = log_of(gateway.extensions), tracing_of(gateway.extensions)
        self._writer = None if log is None else log.writer
        self._exporter = None if tracing is None else tracing.exporter

    async def __call__(self) -> None:
        await (await self._http.post("/chat/completions", json=self._body)).aread()

    async def settle(self) -> None:
        if self._writer is not None:
            await self._writer.flush()
        if self._exporter is not None:
            await self._exporter.flush()


@contextlib.asynccontextmanager
async def served(
    make: Callable[[str], Settings], body: Mapping[str, Any], *, warmup: int = WARMUP
) -> AsyncIterator[One]:
    """The in-process path: the simulator, a gateway on it with the settings `make` gives for
    its base URL, httpx over `GatewayTransport`; `warmup` requests of `body` served first and
    settled (`One.settle`), then yields what serves one more. Leaving closes the gateway (the
    request log writes what is still queued, the exporter exports)."""
    async with run_simulator(SimSettings(port=0)) as sim:
        gateway = build_gateway(make(sim.base_url))
        async with gateway, httpx.AsyncClient(
            transport=GatewayTransport(gateway), base_url="http://levergate/v1"
        ) as http:  # fmt: skip
            one = One(http, body, gateway)
            for _ in range(warmup):
                await one()
            await one.settle()
            yield one


async def cpu_per_request(
    requests: int, *, stream: bool, api_key: str | None = None, request_log: str | None = None
) -> float:
    """Microseconds of this process's CPU per request (gateway + simulator + client) over
    `requests` after the warm-up, the request log's writes of all of them included (`settle`:
    what is still queued at the end written in the window) but not what a process pays once
    (`WARMUP`)."""
    make = functools.partial(settings, api_key=api_key, request_log=request_log)
    return await timed(make, requests, stream=stream)


async def timed(make: Callable[[str], Settings], requests: int, *, stream: bool) -> float:
    """`cpu_per_request` of a gateway with the settings `make` gives (`served`'s)."""
    async with served(make, {**BODY, "stream": stream}, warmup=min(WARMUP, requests)) as one:
        started = time.process_time()
        for _ in range(requests):
            await one()
        await one.settle()
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
