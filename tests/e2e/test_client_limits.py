"""Hostile numbers from a client, end to end (issue 10, defects 1 and 4): simulator <- levergate
<- the official OpenAI SDK on loopback. Each is a clear 400 before the upstream is paid, or a
value clamped so that it cannot hurt another tenant."""

from __future__ import annotations

import uuid
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from levergate.simulator import SimHandle
from tests.e2e.conftest import GatewayFactory
from tests.redis_required import require_redis

QUESTION: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "Name the capital of France."}
]
CACHE = "x-levergate-cache"


def calls(sim: SimHandle, endpoint: str) -> int:
    return int(sim.stats()["requests_by_endpoint"].get(endpoint, 0))


async def ask(client: openai.AsyncOpenAI, *, headers: dict[str, str], **extra: Any) -> Any:
    return await client.chat.completions.with_raw_response.create(
        model="sim-small", messages=QUESTION, max_tokens=8, temperature=0, extra_headers=headers,
        **extra,
    )  # fmt: skip


async def test_twenty_thousand_copies_of_one_input_are_refused(
    sim: SimHandle, client: openai.AsyncOpenAI
) -> None:
    """A 100 KB body of 20,000 copies of "a" made a 651 MB response through the embeddings
    cache; above 2,048 inputs (OpenAI's bound) it is a 400 naming `input`, and so is any
    request of more than 16 inputs per distinct one (issue 20: 2,048 copies made 66.7 MB)."""
    for inputs in (["a"] * 20_000, ["a"] * 2049, ["a"] * 2048):
        with pytest.raises(openai.BadRequestError) as caught:
            await client.embeddings.create(model="sim-embed", input=inputs)
        assert caught.value.status_code == 400
        assert caught.value.param == "input"
    assert calls(sim, "/v1/embeddings") == 0
    texts = [f"text {i % 128}" for i in range(2048)]  # 16 copies of each of 128 inputs
    done = await client.embeddings.create(model="sim-embed", input=texts)
    assert len(done.data) == 2048


@pytest.mark.parametrize(
    "headers",
    [
        {"x-levergate-cache-ttl": "inf"},
        {"x-levergate-cache-ttl": "1e400"},
        {"cache-control": "max-age=-1"},
        {"cache-control": "max-age=nan"},
        {"x-levergate-timeout": "1e-9"},
        {"x-levergate-timeout": "inf"},
        {"x-levergate-timeout": "nan"},
        {"x-levergate-timeout": "-1"},
    ],
)
async def test_garbage_numbers_are_a_400_before_the_upstream_is_paid(
    sim: SimHandle, client: openai.AsyncOpenAI, headers: dict[str, str]
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        await ask(client, headers=headers)
    assert caught.value.status_code == 400
    assert "seconds" in caught.value.message
    assert calls(sim, "/v1/chat/completions") == 0


async def test_numbers_too_large_are_clamped(sim: SimHandle, client: openai.AsyncOpenAI) -> None:
    big = {"x-levergate-cache-ttl": "1e306", "x-levergate-timeout": "1e300"}
    assert (await ask(client, headers=big)).headers[CACHE] == "miss"
    assert (await ask(client, headers={})).headers[CACHE] == "hit"
    assert calls(sim, "/v1/chat/completions") == 1


async def test_one_tenants_ttl_does_not_cool_the_shared_store_down(
    sim: SimHandle, gateway_at: GatewayFactory
) -> None:
    """`x-levergate-cache-ttl: 1e20` made Redis refuse the write, which put the cache store in
    its cool-down for every tenant: a victim's hits became misses."""
    import redis.asyncio as aioredis

    await require_redis("redis://127.0.0.1:6379/0")
    probe = aioredis.Redis.from_url("redis://127.0.0.1:6379/0", socket_connect_timeout=10)
    prefix = f"levergate:test:{uuid.uuid4().hex}:"
    store = {"backend": "redis", "redis_prefix": prefix, "timeout_seconds": 1.0,
             "front_bytes": 0, "cooldown_seconds": 60}  # fmt: skip
    victim = {"x-levergate-tenant": "victim"}
    attacker = {"x-levergate-tenant": "attacker", "x-levergate-cache-ttl": "1e20"}
    try:
        async with (
            gateway_at(sim.base_url, cache={"store": store}) as url,
            openai.AsyncOpenAI(base_url=url, api_key="-", max_retries=0) as client,
        ):
            assert (await ask(client, headers=victim)).headers[CACHE] == "miss"
            for seed in range(3):
                reply = await ask(client, headers=attacker, seed=seed)
                assert reply.headers[CACHE] == "miss"
                assert (await ask(client, headers=victim)).headers[CACHE] == "hit"
            assert (await ask(client, headers=attacker, seed=0)).headers[CACHE] == "hit"
    finally:
        keys = [k async for k in probe.scan_iter(match=prefix + "*")]
        if keys:
            await probe.delete(*keys)
        await probe.aclose()
