"""Tenants on one gateway's batch runner, end to end (a real gateway on loopback, the simulator
upstream, plain HTTP clients): a webhook receiver that never answers delays no batch, and one
tenant's thousands of queued lines delay neither another tenant's 1-line batch nor its async
request. Each claim is about state (what finished while what was still running), not time."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from levergate.simulator import LatencySettings, SimSettings, run_simulator
from tests.e2e.conftest import GatewayFactory
from tests.e2e.test_async_requests import SECRET, until_done
from tests.e2e.test_batch_api import batch_settings, jsonl

BODY = {"model": "m", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}


class Hanging:
    """A webhook receiver that reads each request and never answers."""

    def __init__(self) -> None:
        self.held = 0
        self.release = asyncio.Event()
        self.port = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        self.held += 1
        await self.release.wait()
        writer.close()


@pytest.fixture
async def hanging() -> AsyncIterator[Hanging]:
    found = Hanging()
    server = await asyncio.start_server(found.handle, "127.0.0.1", 0)
    found.port = server.sockets[0].getsockname()[1]
    async with server:
        yield found
        found.release.set()


@pytest.fixture
async def gateway(
    gateway_for: GatewayFactory, tmp_path: Path, hanging: Hanging
) -> AsyncIterator[str]:
    # Each answer takes 100 ms: tenant a's 3,000 lines take over 2.6 s at 115 in flight.
    sim_settings = SimSettings(port=0, latency=LatencySettings(ttft_ms=100))
    async with run_simulator(sim_settings) as sim, gateway_for(
        upstreams=[{"name": "sim", "base_url": sim.base_url}],
        models=[{"name": "m", "upstream": "sim"}],
        batch=batch_settings(tmp_path),
        async_requests={"enabled": True},
        webhooks={"targets": {"hang": {"url": f"http://127.0.0.1:{hanging.port}/",
                                       "secret": SECRET, "timeout_seconds": 300}}},
    ) as url:  # fmt: skip
        yield url


def tenant(name: str) -> dict[str, str]:
    return {"x-levergate-tenant": name}


async def start_batch(http: httpx.AsyncClient, lines: int, who: str) -> str:
    rows = [{"custom_id": f"c{i}", "method": "POST", "url": "/v1/chat/completions",
             "body": BODY} for i in range(lines)]  # fmt: skip
    files: dict[str, tuple[str | None, bytes | str]] = {
        "file": ("in.jsonl", jsonl(rows)),
        "purpose": (None, "batch"),
    }
    uploaded = await http.post("/files", files=files, headers=tenant(who))
    assert uploaded.status_code == 200, uploaded.text
    made = await http.post("/batches", headers=tenant(who), json={
        "input_file_id": uploaded.json()["id"], "endpoint": "/v1/chat/completions",
        "completion_window": "24h"})  # fmt: skip
    assert made.status_code == 200, made.text
    return str(made.json()["id"])


async def batch(http: httpx.AsyncClient, batch_id: str, who: str) -> dict[str, Any]:
    return (await http.get(f"/batches/{batch_id}", headers=tenant(who))).json()  # type: ignore[no-any-return]


async def until_completed(http: httpx.AsyncClient, batch_id: str, who: str) -> None:
    for _ in range(400):  # 20 s: what a batch of one line needs, many times over
        if (await batch(http, batch_id, who))["status"] == "completed":
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{batch_id} did not complete")


async def test_a_hanging_webhook_receiver_delays_no_batch(gateway: str, hanging: Hanging) -> None:
    async with httpx.AsyncClient(base_url=gateway, timeout=30) as http:
        hooked = []
        hook = {**tenant("a"), "x-levergate-webhook": "hang"}
        for _ in range(6):  # more than the target's share of the delivery workers
            made = await http.post("/async/chat/completions", json=BODY, headers=hook)
            hooked.append(made.json()["id"])
        for _ in range(200):
            if hanging.held:
                break
            await asyncio.sleep(0.05)
        assert hanging.held, "no delivery reached the receiver: proves nothing"
        small = await start_batch(http, 1, "b")
        await until_completed(http, small, "b")
        # ...while every delivery is still hanging (none answered, none given up).
        for request_id in hooked:
            found = (await http.get(f"/async/{request_id}", headers=tenant("a"))).json()
            assert found["webhook"]["state"] == "pending"
        assert hanging.held <= 4  # one target holds at most half the delivery workers


async def test_a_flood_of_lines_does_not_delay_another_tenants_work(gateway: str) -> None:
    async with httpx.AsyncClient(base_url=gateway, timeout=60) as http:
        flood = await start_batch(http, 3000, "a")
        for _ in range(200):  # the flood's lines are queued and running
            if (await batch(http, flood, "a"))["request_counts"]["completed"] > 0:
                break
            await asyncio.sleep(0.05)
        small = await start_batch(http, 1, "b")
        queued = await http.post("/async/chat/completions", json=BODY, headers=tenant("b"))
        await until_completed(http, small, "b")
        request = await until_done(gateway, queued.json()["id"], tenant="b")
        assert request["status"] == "completed"
        counts = (await batch(http, flood, "a"))["request_counts"]
        assert counts["completed"] < counts["total"] == 3000, counts
        with contextlib.suppress(httpx.HTTPError):
            await http.post(f"/batches/{flood}/cancel", headers=tenant("a"))
