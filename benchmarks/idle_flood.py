"""Idle sockets against the connection cap: the attack probe's pattern. A hostile peer (from
127.0.0.2) keeps `--idle` sockets open that never send a byte, re-opening each one as soon as
the gateway closes it, while a normal client (from 127.0.0.1) sends chat requests through the
gateway to the simulator, each on a new connection. Reported: the share of the normal
client's requests answered 200, with the per-peer limit and idle shedding off (what the
gateway did before them) and on (the defaults), in the same run.

    PYTHONPATH=src python benchmarks/idle_flood.py [--idle 4300] [--cap 4096] [--seconds 20]

A real `levergate serve` process on loopback; writes results/idle_flood.{json,md}.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from harness import Output, add_output_options, free_port, stamp, stop, wait_port

from levergate.simulator import SimSettings, run_simulator

CHAT = b'{"model": "m", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}'
REQUEST = (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
           b"content-length: %d\r\nconnection: close\r\n\r\n%s") % (len(CHAT), CHAT)  # fmt: skip
FILL_SECONDS = 5.0  # the flood alone first: its sockets open before the normal client starts
OFF = {"max_connections_per_peer": 0, "shed_idle_after_seconds": 1e9}


async def hostile(port: int, count: int, stop_at: float, opened: list[int]) -> None:
    """`count` silent sockets from 127.0.0.2, each re-opened when the gateway closes it."""

    async def one() -> None:
        while time.monotonic() < stop_at:
            try:
                reader, writer = await asyncio.open_connection(
                    "127.0.0.1", port, local_addr=("127.0.0.2", 0)
                )
            except OSError:
                await asyncio.sleep(0.05)
                continue
            opened[0] += 1
            with contextlib.suppress(OSError, TimeoutError):
                async with asyncio.timeout(max(0.0, stop_at - time.monotonic())):
                    await reader.read()  # until the gateway closes it
            writer.close()

    async with asyncio.TaskGroup() as tasks:
        for _ in range(count):
            tasks.create_task(one())


async def normal(port: int, start_at: float, stop_at: float) -> tuple[int, int]:
    """(answered 200, sent) for requests on new connections from 127.0.0.1."""
    await asyncio.sleep(max(0.0, start_at - time.monotonic()))
    good = sent = 0
    while time.monotonic() < stop_at:
        sent += 1
        try:
            async with asyncio.timeout(5):
                reader, writer = await asyncio.open_connection(
                    "127.0.0.1", port, local_addr=("127.0.0.1", 0)
                )
                writer.write(REQUEST)
                answer = await reader.read()
                writer.close()
            good += answer.startswith(b"HTTP/1.1 200 ")
        except (OSError, TimeoutError):
            pass
    return good, sent


async def one_run(sim_url: str, *, server: dict[str, Any], idle: int, seconds: float,
                  tmp: Path, fill: float) -> dict[str, Any]:  # fmt: skip
    """The flood alone for `fill` seconds, then the normal client beside it for `seconds`."""
    port = free_port()
    config = tmp / f"gw-{port}.yaml"
    config.write_text(yaml.safe_dump({"server": {"port": port, **server}}))
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", "src")}
    with (tmp / f"gw-{port}.log").open("wb") as log:
        command = [sys.executable, "-m", "levergate.cli.main", "serve", "--config",
                   str(config), "--upstream", sim_url]  # fmt: skip
        # Started once, before the measured part.
        proc = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)  # noqa: ASYNC220
    try:
        wait_port(port, proc=proc)
        now = time.monotonic()
        opened = [0]
        flood = asyncio.create_task(hostile(port, idle, now + fill + seconds, opened))
        good, sent = await normal(port, now + fill, now + fill + seconds)
        await flood
    finally:
        stop(proc)
    return {"answered_200": good, "sent": sent, "success": good / max(1, sent),
            "hostile_opens": opened[0]}  # fmt: skip


async def main(idle: int, cap: int, seconds: float, out: Output, *, fill: float) -> None:
    async with run_simulator(SimSettings(port=0)) as sim:
        with tempfile.TemporaryDirectory() as tmp_dir:
            tmp = Path(tmp_dir)
            base = {"max_connections": cap}
            off = await one_run(sim.base_url, server={**base, **OFF}, idle=idle,
                                seconds=seconds, tmp=tmp, fill=fill)  # fmt: skip
            on = await one_run(sim.base_url, server=base, idle=idle, seconds=seconds, tmp=tmp,
                               fill=fill)  # fmt: skip
    result = {**stamp(), "idle_sockets": idle, "max_connections": cap, "seconds": seconds,
              "limits_off": off, "limits_on": on}  # fmt: skip
    rows = "\n".join(
        f"| {name} | {r['answered_200']} / {r['sent']} | {r['success']:.3f} | "
        f"{r['hostile_opens']} |"
        for name, r in (("per-peer limit and shedding off (before)", off),
                        ("defaults: 1,024 per peer, shed silent > 1 s (after)", on))
    )  # fmt: skip
    out.write("idle_flood", result, (
        f"# Idle sockets against the connection cap\n\n{stamp()['date']}, {stamp()['machine']}"
        f": one peer keeps {idle} silent sockets open (re-opened when closed) against a cap of "
        f"{cap}; a normal client sends chat requests, each on a new connection, for {seconds:g} s."
        "\n\n| gateway | normal client answered 200 | success | hostile sockets opened |\n"
        f"|---|---:|---:|---:|\n{rows}\n"
    ))  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--idle", type=int, default=4300)
    parser.add_argument("--cap", type=int, default=4096)
    parser.add_argument("--seconds", type=float, default=20.0)
    add_output_options(parser)
    args = parser.parse_args()
    fill = FILL_SECONDS
    if args.smoke:  # 64 sockets open in well under a second
        args.idle, args.cap, args.seconds, fill = 64, 48, 1.0, 1.0
    asyncio.run(main(args.idle, args.cap, args.seconds, Output.of(args), fill=fill))
