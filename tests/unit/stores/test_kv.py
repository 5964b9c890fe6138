"""The KV stores, and what the caches do when one is down, slow, locked or corrupt."""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from levergate.layers.cache.entries import CACHE_HEADER
from levergate.layers.cache.stats import CacheStats
from levergate.stores.entry import CorruptEntry, Entry, Form, decode, encode
from levergate.stores.kv import KV, SafeKV, StoreError, TieredKV
from levergate.stores.kv_memory import ENTRY_OVERHEAD, MemoryKV
from levergate.stores.kv_redis import RedisKV
from levergate.stores.kv_sqlite import SqliteKV
from levergate.testing import FakeUpstream, ManualClock, sample_value
from tests.redis_required import require_redis, swallowed_cancellations
from tests.unit.layers.cache.helpers import chat, exact_cache

REDIS_URL = "redis://127.0.0.1:6379/0"


@pytest.fixture
async def redis_client() -> AsyncIterator[aioredis.Redis]:
    """A real Redis. Missing Redis skips locally but FAILS under CI=true."""
    await require_redis(REDIS_URL)
    client = aioredis.Redis.from_url(REDIS_URL, socket_connect_timeout=10)
    yield client
    await client.aclose()


def safe(inner: KV, clock: ManualClock, stats: CacheStats, *, cooldown: float = 0) -> SafeKV:
    return SafeKV(
        inner,
        name="test",
        timeout=0.05,
        cooldown=cooldown,
        max_value_bytes=1 << 20,
        clock=clock,
        on_fault=stats.fault,
    )


async def test_memory_store_is_an_lru_bounded_in_bytes_with_expiry() -> None:
    clock = ManualClock()
    per_entry = len("k0") + 100 + ENTRY_OVERHEAD
    store = MemoryKV(max_bytes=3 * per_entry, clock=clock)
    for i in range(3):
        await store.set(f"k{i}", bytes(100), ttl=10)
    assert await store.get("k0") is not None  # k0 is now the most recently used
    await store.set("k3", bytes(100), ttl=10)
    assert await store.get("k1") is None  # the least recently used went
    assert await store.get("k0") is not None
    assert store.size_bytes <= 3 * per_entry
    clock.advance(10)
    assert await store.get("k0") is None
    await store.set("huge", bytes(10 * per_entry), ttl=10)
    assert await store.get("huge") is None
    assert await store.get("k3") is None  # expired too, never evicted by the huge value


async def test_sqlite_store_survives_a_restart_and_honours_ttl(tmp_path: Path) -> None:
    path = tmp_path / "not" / "yet" / "there" / "cache.sqlite3"  # its folder is made
    now = [1000.0]
    store = SqliteKV(path, wall=lambda: now[0])
    await store.set("a", b"one", ttl=60)
    await store.set("b", b"two", ttl=5)
    await store.aclose()
    reopened = SqliteKV(path, wall=lambda: now[0])
    assert await reopened.get("a") == b"one"
    now[0] += 10
    assert await reopened.get("b") is None
    await reopened.delete("a")
    assert await reopened.get("a") is None
    await reopened.aclose()


async def test_redis_store_namespaces_keys_and_sets_a_ttl(redis_client: aioredis.Redis) -> None:
    prefix = f"levergate:test:{uuid.uuid4().hex}:"
    store = RedisKV(url=REDIS_URL, prefix=prefix, timeout=1.0)
    try:
        await store.set("k", b"value", ttl=30)
        assert await store.get("k") == b"value"
        assert await redis_client.get(prefix + "k") == b"value"
        ttl_ms = await redis_client.pttl(prefix + "k")
        assert 0 < ttl_ms <= 30_000
        await store.delete("k")
        assert await store.get("k") is None
    finally:
        await store.aclose()


async def test_exact_cache_over_redis_shares_entries_between_replicas(
    redis_client: aioredis.Redis,
) -> None:
    prefix = f"levergate:test:{uuid.uuid4().hex}:"
    stores = [RedisKV(url=REDIS_URL, prefix=prefix, timeout=1.0) for _ in range(2)]
    try:
        upstream = FakeUpstream()
        one, _ = exact_cache(upstream, store=stores[0])
        two, _ = exact_cache(upstream, store=stores[1])
        await one(chat())
        assert (await two(chat())).headers[CACHE_HEADER] == "hit"
        assert len(upstream.calls) == 1
    finally:
        for store in stores:
            await store.aclose()
        keys = [k async for k in redis_client.scan_iter(match=prefix + "*")]
        if keys:
            await redis_client.delete(*keys)


async def test_a_down_redis_is_a_counted_miss_never_a_failed_request() -> None:
    clock, stats = ManualClock(), CacheStats()
    down = RedisKV(url="redis://127.0.0.1:1/0", prefix="x:", timeout=0.2)
    store = safe(down, clock, stats)
    upstream = FakeUpstream()
    cache, _ = exact_cache(upstream, store=store, stats=stats)
    for _ in range(2):
        reply = await cache(chat())
        assert reply.headers[CACHE_HEADER] == "miss"
    assert len(upstream.calls) == 2
    assert sample_value(stats.faults, "test", "get", "error") == 2
    assert sample_value(stats.faults, "test", "set", "error") == 2
    await down.aclose()


class SlowKV:
    async def get(self, key: str) -> bytes | None:
        await asyncio.sleep(10)
        return None

    async def set(self, key: str, value: bytes, *, ttl: float) -> None:
        await asyncio.sleep(10)

    async def delete(self, key: str) -> None:
        await asyncio.sleep(10)


async def test_a_slow_store_times_out_into_a_miss_then_cools_down() -> None:
    clock, stats = ManualClock(), CacheStats()
    store = safe(SlowKV(), clock, stats, cooldown=5)
    cache, _ = exact_cache(FakeUpstream(), store=store, stats=stats)
    assert (await cache(chat())).headers[CACHE_HEADER] == "miss"
    assert sample_value(stats.faults, "test", "get", "timeout") == 1
    # Cooling down: the store is skipped rather than waited on again.
    assert (await cache(chat())).headers[CACHE_HEADER] == "miss"
    assert sample_value(stats.faults, "test", "get", "cooling_down") == 1
    assert sample_value(stats.faults, "test", "set", "cooling_down") == 2
    clock.advance(6)
    assert await store.get("k") is None
    assert sample_value(stats.faults, "test", "get", "timeout") == 2


class SlowWrites(MemoryKV):
    """Reads answer; writes take longer than the store's timeout (a burst of large values)."""

    async def set(self, key: str, value: bytes, *, ttl: float) -> None:
        await asyncio.sleep(10)


async def test_a_write_that_times_out_is_dropped_and_cools_nothing_down() -> None:
    """One tenant's burst of large writes outlasting the timeout made every tenant's lookups
    miss for the cool-down (the soak, issue 20): the write is dropped and counted, reads go on."""
    clock, stats = ManualClock(), CacheStats()
    inner = SlowWrites(max_bytes=1 << 20, clock=clock)
    await MemoryKV.set(inner, "cached", b"answer", ttl=60)
    store = safe(inner, clock, stats, cooldown=5)
    await store.set("large", b"x" * 1000, ttl=60)
    assert sample_value(stats.faults, "test", "set", "timeout") == 1
    assert await store.get("cached") == b"answer"  # not cooling down
    assert await store.get("large") is None
    assert sample_value(stats.faults, "test", "get", "cooling_down") == 0


async def test_a_locked_sqlite_file_is_a_counted_miss(tmp_path: Path) -> None:
    path = tmp_path / "locked.sqlite3"
    clock, stats = ManualClock(), CacheStats()
    sqlite = SqliteKV(path, busy_timeout=0.02)
    await sqlite.set("warm", b"x", ttl=60)  # creates the file and the table
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        store = safe(sqlite, clock, stats)
        upstream = FakeUpstream()
        cache, _ = exact_cache(upstream, store=store, stats=stats)
        assert (await cache(chat())).headers[CACHE_HEADER] == "miss"
        faults = sum(
            sample_value(stats.faults, "test", op, reason)
            for op in ("get", "set")
            for reason in ("error", "timeout")
        )
        assert faults >= 1
    finally:
        holder.execute("ROLLBACK")
        holder.close()
        await sqlite.aclose()


async def test_a_sqlite_file_that_cannot_be_made_is_a_counted_miss(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("not a folder")
    clock, stats = ManualClock(), CacheStats()
    sqlite = SqliteKV(tmp_path / "a-file" / "cache.sqlite3")
    try:
        store = safe(sqlite, clock, stats)
        cache, _ = exact_cache(FakeUpstream(), store=store, stats=stats)
        assert (await cache(chat())).headers[CACHE_HEADER] == "miss"
        assert sample_value(stats.faults, "test", "get", "error") == 1
    finally:
        await sqlite.aclose()


async def test_a_corrupt_sqlite_row_is_dropped_and_counted(tmp_path: Path) -> None:
    sqlite = SqliteKV(tmp_path / "c.sqlite3")
    upstream = FakeUpstream()
    cache, stats = exact_cache(upstream, store=sqlite)
    await cache(chat())
    conn = sqlite3.connect(tmp_path / "c.sqlite3", isolation_level=None)
    conn.execute("UPDATE kv SET value = substr(value, 1, 30)")
    conn.close()
    assert (await cache(chat())).headers[CACHE_HEADER] == "miss"
    assert sample_value(stats.corrupt, "exact") == 1
    assert (await cache(chat())).headers[CACHE_HEADER] == "hit"
    await sqlite.aclose()


async def test_safe_kv_swallows_only_store_failures() -> None:
    class Broken:
        async def get(self, key: str) -> bytes | None:
            raise StoreError("nope")

        async def set(self, key: str, value: bytes, *, ttl: float) -> None:
            raise StoreError("nope")

        async def delete(self, key: str) -> None:
            raise ValueError("a bug, not a store failure")

    clock, stats = ManualClock(), CacheStats()
    store = safe(Broken(), clock, stats)
    assert await store.get("k") is None
    await store.set("k", b"v", ttl=1)
    with pytest.raises(ValueError, match="a bug"):
        await store.delete("k")


async def test_a_store_failing_many_calls_at_once_is_logged_once_per_cooldown(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Every call in flight when the store died fails together, before the circuit opens: each
    is counted, one line is logged, and the next line comes only after the cool-down."""
    clock, stats = ManualClock(), CacheStats()
    store = safe(SlowKV(), clock, stats, cooldown=5)
    with caplog.at_level("WARNING", logger="levergate.cache"):
        assert await asyncio.gather(*(store.get(f"k{i}") for i in range(50))) == [None] * 50
        assert sample_value(stats.faults, "test", "get", "timeout") == 50
        clock.advance(6)
        assert await store.get("k") is None
    failed = [r for r in caplog.records if "failed on get" in r.getMessage()]
    assert len(failed) == 2


async def test_tiered_store_answers_from_the_front_and_writes_both() -> None:
    clock = ManualClock()
    front = MemoryKV(max_bytes=10_000, clock=clock)
    back = MemoryKV(max_bytes=10_000, clock=clock)
    tiered = TieredKV(front, back, front_ttl=5)
    await tiered.set("k", b"v", ttl=60)
    assert await front.get("k") == b"v"
    assert await back.get("k") == b"v"
    clock.advance(6)
    assert await front.get("k") is None
    assert await tiered.get("k") == b"v"
    assert await front.get("k") == b"v"
    await tiered.delete("k")
    assert await back.get("k") is None


def test_entry_codec_round_trips_and_refuses_damage() -> None:
    entry = Entry(Form.STREAM, (b"a", b"", b"ccc"), created=1.5, expires=9.0)
    data = encode(entry, key="k")
    assert decode(data, key="k") == entry
    for bad in (data[:-1], data + b"x", b"LGC2" + data[4:], data[:10]):
        with pytest.raises(CorruptEntry):
            decode(bad, key="k")
    with pytest.raises(CorruptEntry):
        decode(data, key="other")


async def test_a_cancelled_redis_call_stays_cancelled(redis_client: aioredis.Redis) -> None:
    """redis-py with a socket timeout can swallow a cancellation that lands inside a command
    (it returns, or raises a connection error that would put the store in its cool-down)."""
    prefix = f"levergate:test:{uuid.uuid4().hex}:"
    store = RedisKV(url=REDIS_URL, prefix=prefix, timeout=0.1)
    try:
        await store.set("k", b"v" * 1000, ttl=60)
        assert await swallowed_cancellations(lambda: store.get("k"), seed=3) == 0
    finally:
        await redis_client.delete(prefix + "k")
        await store.aclose()
