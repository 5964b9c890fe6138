"""The Responses store under a hostile tenant, end to end: a real gateway on loopback in front of
the simulator, the official `openai` SDK as the client, and the store in memory, in SQLite and
in a Redis of the test's own (started here with a `maxmemory`, so filling it hurts no one).

Each turn is stored once (continuing a 2 MB conversation ten times stored 10 copies of it
before), one tenant's flood evicts its own responses and never another tenant's, and responses
never fill a Redis they share with the rate limits (which then fell back to per-process)."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import openai
from redis.asyncio import Redis

from levergate.simulator import SimHandle
from tests.e2e.conftest import GatewayFactory
from tests.required import program

MB = 1024 * 1024


def sdk(url: str, tenant: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=url, api_key="x", max_retries=0,
                              default_headers={"x-levergate-tenant": tenant})  # fmt: skip


async def conversation(client: openai.AsyncOpenAI, turns: int, *, first: str) -> str:
    """`turns` turns, the first saying `first`; the last response's id."""
    response = await client.responses.create(model="m", input=first, max_output_tokens=16)
    for n in range(turns - 1):
        response = await client.responses.create(model="m", input=f"and {n}?",
                                                 previous_response_id=response.id,
                                                 max_output_tokens=16)  # fmt: skip
    return response.id


async def test_continuing_a_big_conversation_stores_only_the_new_turns(
    sim: SimHandle, gateway_at: GatewayFactory, tmp_path: Path
) -> None:
    path = tmp_path / "responses.sqlite3"
    store = {"store": {"backend": "sqlite", "sqlite_path": str(path)}}
    async with gateway_at(sim.base_url, responses=store) as url, sdk(url, "acme") as client:
        last = await conversation(client, 11, first="x" * (2 * MB))
    size = path.stat().st_size  # the gateway closed: its WAL is checkpointed into the file
    assert 2 * MB < size < 5 * MB  # one copy of the 2 MB turn, not eleven
    # A restart reads the conversation back turn by turn from the file.
    async with gateway_at(sim.base_url, responses=store) as url, sdk(url, "acme") as client:
        more = await client.responses.create(model="m", input="last?", previous_response_id=last,
                                             max_output_tokens=16)  # fmt: skip
        assert more.usage is not None
        assert more.usage.input_tokens > MB // 8  # the 2 MB first turn was in the prompt


async def test_one_tenants_flood_never_evicts_another_tenants_conversation(
    sim: SimHandle, gateway_at: GatewayFactory
) -> None:
    store = {"store": {"backend": "memory", "memory_bytes": 4 * MB}}
    async with (
        gateway_at(sim.base_url, responses=store) as url,
        sdk(url, "bob") as bob,
        sdk(url, "mallory") as mallory,
    ):
        kept = await conversation(bob, 3, first="remember this")
        for _ in range(40):  # 10 MB of 256 KB inputs into a 4 MB store
            await mallory.responses.create(model="m", input="y" * (256 * 1024),
                                           max_output_tokens=16)  # fmt: skip
        again = await bob.responses.create(model="m", input="and?", previous_response_id=kept,
                                           max_output_tokens=16)  # fmt: skip
        assert again.previous_response_id == kept


@asynccontextmanager
async def own_redis(folder: Path, *, maxmemory: str) -> AsyncIterator[str]:
    """A redis-server of this test's own on a unix socket, with `maxmemory` and `noeviction`
    (the policy that refuses writes when full, as the shared Redis here cannot be made to)."""
    binary = program("redis-server", install="apt-get install redis-server")
    sock = folder / "redis.sock"
    proc = subprocess.Popen(
        [binary, "--port", "0", "--unixsocket", str(sock), "--save", "", "--appendonly", "no",
         "--maxmemory", maxmemory, "--maxmemory-policy", "noeviction"],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"unix://{sock}"
    try:
        for _ in range(200):  # its socket appears once it listens
            if sock.exists():
                break
            await asyncio.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=15)


async def test_responses_never_fill_a_redis_shared_with_the_rate_limits(
    sim: SimHandle, gateway_at: GatewayFactory, tmp_path: Path
) -> None:
    async with own_redis(tmp_path, maxmemory="24mb") as redis_url:
        settings: dict[str, Any] = {
            # One Redis for both, said once.
            "stores": {"default": {"redis_url": redis_url}},
            "responses": {"store": {"max_bytes": 8 * MB, "tenant_bytes": 4 * MB}},
            "traffic": {"tenant_default": {"rpm": 1_000_000}},
        }  # fmt: skip
        async with (
            gateway_at(sim.base_url, **settings) as url,
            sdk(url, "bob") as bob,
            sdk(url, "mallory") as mallory,
        ):
            kept = await conversation(bob, 3, first="remember this")
            for _ in range(120):  # 30 MB of 256 KB responses into a 24 MB Redis
                await mallory.responses.create(model="m", input="y" * (256 * 1024),
                                               max_output_tokens=16)  # fmt: skip
            again = await bob.responses.create(model="m", input="and?", max_output_tokens=16,
                                               previous_response_id=kept)  # fmt: skip
            assert again.previous_response_id == kept
            async with httpx.AsyncClient() as http:
                metrics = (await http.get(url.removesuffix("/v1") + "/metrics")).text
            assert "levergate_limit_store_failovers_total 0.0" in metrics
        async with Redis.from_url(redis_url) as client:
            info = await client.info("memory")
            assert info["used_memory"] < 16 * MB  # 8 MB of responses and their bookkeeping
            await client.set("room-left", b"z" * MB)  # Redis still takes writes
