"""Faults of a shared store must cost the request that met them, never every tenant (issue 10):
a write Redis refuses for its own data cools nothing down, and a hung Redis — accepting
connections, never answering — costs one request its timeout, then the circuit skips it for
the others until one trial finds it answering again. Real Redis at 127.0.0.1:6379 (skipped
outside CI when missing, a failure under CI=true); the hung server is a loopback socket that
can start relaying to the real Redis."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
import redis.asyncio as aioredis

from levergate.layers.cache.stats import CacheStats
from levergate.policies.gcra import Rate
from levergate.stores.kv import SafeKV
from levergate.stores.kv_redis import RedisKV
from levergate.stores.limits import Charge
from levergate.stores.limits_redis import FailoverLimitStore, connect
from levergate.testing import ManualClock, sample_value
from tests.hung_redis import HungRedis
from tests.redis_required import require_redis

REDIS_URL = "redis://127.0.0.1:6379/0"


@pytest.fixture
async def redis_client() -> AsyncIterator[aioredis.Redis]:
    await require_redis(REDIS_URL)
    client = aioredis.Redis.from_url(REDIS_URL, socket_connect_timeout=10)
    yield client
    await client.aclose()


def safe(inner: RedisKV, clock: ManualClock, stats: CacheStats) -> SafeKV:
    return SafeKV(
        inner,
        name="redis",
        timeout=1.0,
        cooldown=10,
        max_value_bytes=4096,
        clock=clock,
        on_fault=stats.fault,
    )


async def test_a_write_redis_refuses_cools_nothing_down(redis_client: aioredis.Redis) -> None:
    """`x-levergate-cache-ttl: 1e20` made Redis refuse the write, and the refusal put the
    cache store in its cool-down for every tenant."""
    prefix = f"levergate:test:{uuid.uuid4().hex}:"
    clock, stats = ManualClock(), CacheStats()
    redis = RedisKV(url=REDIS_URL, prefix=prefix, timeout=1.0)
    store = safe(redis, clock, stats)
    try:
        await store.set("victim", b"answer", ttl=60)
        await store.set("huge-ttl", b"v", ttl=1e20)  # clamped to what Redis takes
        assert await store.get("huge-ttl") == b"v"
        assert await redis_client.pttl(prefix + "huge-ttl") > 0
        await store.set("huge-value", bytes(5000), ttl=60)  # over the entry limit: not sent
        await redis_client.rpush(prefix + "list", b"x")  # Redis refuses GET on a list
        assert await store.get("list") is None
        assert sample_value(stats.faults, "redis", "set", "refused") == 1
        assert sample_value(stats.faults, "redis", "get", "refused") == 1
        assert await store.get("victim") == b"answer"  # no cool-down for anyone
        assert await store.get("huge-value") is None
        assert sample_value(stats.faults, "redis", "get", "cooling_down") == 0
    finally:
        await redis.aclose()
        await redis_client.delete(*[prefix + k for k in ("victim", "huge-ttl", "list")])


async def test_a_hung_cache_store_costs_one_timeout_then_one_trial_per_cooldown(
    redis_client: aioredis.Redis,
) -> None:
    clock, stats = ManualClock(), CacheStats()
    key = f"levergate:test:{uuid.uuid4().hex}"
    hung = HungRedis()
    async with hung as url:
        redis = RedisKV(url=url, prefix="", timeout=1.0)
        store = safe(redis, clock, stats)
        try:
            await _one_trial_at_a_time(hung, clock, lambda: store.get(key), missing=None)
            assert sample_value(stats.faults, "redis", "get", "timeout") == 2
            hung.relay = True
            clock.advance(10)
            await store.set(key, b"back", ttl=60)  # the trial finds it answering
            assert await store.get(key) == b"back"
            assert await redis_client.get(key) == b"back"
        finally:
            await redis.aclose()
            await redis_client.delete(key)


async def test_a_hung_limit_store_costs_one_timeout_then_one_trial_per_retry(
    redis_client: aioredis.Redis,
) -> None:
    clock = ManualClock()
    prefix = f"test:{{{uuid.uuid4().hex}}}:"
    charge = [Charge("rpm", 1, Rate(limit=100, window=60.0, burst=100))]
    hung = HungRedis()
    async with hung as url:
        store = FailoverLimitStore(
            connect(url=url, prefix=prefix, timeout=1.0), clock=clock, retry_seconds=10
        )
        try:
            await _one_trial_at_a_time(hung, clock, lambda: store.acquire(charge), missing=0.0)
            assert store.failovers == 1
            assert store.degraded
            hung.relay = True
            clock.advance(10)
            assert await store.acquire(charge) == 0.0
            assert not store.degraded
            assert await redis_client.exists(prefix + "rpm") == 1  # charged in Redis again
        finally:
            await store.aclose()
            await redis_client.delete(prefix + "rpm")


async def _one_trial_at_a_time(
    hung: HungRedis, clock: ManualClock, start: Callable[[], Awaitable[object]], *, missing: object
) -> None:
    """The first call waits out its timeout; during the cool-down nothing reaches the store;
    after it, one trial call does while every other call is answered without it."""
    assert await start() == missing
    first = hung.connections
    assert first >= 1
    assert await asyncio.gather(*(start() for _ in range(20))) == [missing] * 20
    assert hung.connections == first  # cooling down: the store is not asked
    clock.advance(10)
    trial = asyncio.ensure_future(start())
    await hung.connected(first + 1)
    others = await asyncio.gather(*(start() for _ in range(20)))
    assert others == [missing] * 20
    assert hung.connections == first + 1  # the others were answered without the store
    assert await trial == missing
