"""`TenantKV` on every backend (memory, SQLite, Redis): a tenant over its bound loses its own
least recently used entries, a store over its total loses those of the tenant holding the
most, a read keeps an entry alive, an entry unused for the TTL is gone, and no tenant ever
sees another's keys."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from levergate.stores.kv import StoreRefused
from levergate.stores.tenant_kv import ENTRY_OVERHEAD, Bounds, MemoryTenantKV
from levergate.stores.tenant_kv_redis import RedisTenantKV
from levergate.stores.tenant_kv_sqlite import SqliteTenantKV
from levergate.testing import ManualClock
from tests.redis_required import require_redis

REDIS_URL = "redis://127.0.0.1:6379/0"
KB = 1024
# Each entry below costs its value, its key ("k00") and the bookkeeping overhead.
COST = KB + 3 + ENTRY_OVERHEAD
BOUNDS = Bounds(tenant_bytes=4 * COST, total_bytes=10 * COST, ttl=3600.0)

Made = Callable[[Bounds], Any]


async def _purge(url: str, prefix: str) -> None:
    from redis.asyncio import Redis

    client = Redis.from_url(url)
    async with client:
        keys = [key async for key in client.scan_iter(match=prefix + "*", count=1000)]
        if keys:
            await client.delete(*keys)


@pytest.fixture(params=["memory", "sqlite", "redis"])
async def made(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Made]:
    """A factory of the backend under test, each store closed (and its Redis keys removed)."""
    closers: list[Any] = []
    prefix = f"levergate-test:{{tkv-{uuid.uuid4().hex}}}:"
    if request.param == "redis":
        await require_redis(REDIS_URL)

    def make(bounds: Bounds) -> Any:
        if request.param == "memory":
            return MemoryTenantKV(bounds=bounds, clock=ManualClock())
        if request.param == "sqlite":
            store: Any = SqliteTenantKV(tmp_path / f"{uuid.uuid4().hex}.sqlite3", bounds=bounds,
                                        busy_timeout=1.0)  # fmt: skip
        else:
            store = RedisTenantKV(url=REDIS_URL, prefix=prefix, bounds=bounds, timeout=2.0)
        closers.append(store.aclose)
        return store

    yield make
    for close in closers:
        await close()
    if request.param == "redis":
        await _purge(REDIS_URL, prefix)


def value(tag: int) -> bytes:
    return bytes([tag % 256]) * KB


async def present(store: Any, tenant: str, keys: list[str]) -> list[str]:
    found = await store.get(tenant, keys)
    return [key for key, got in zip(keys, found, strict=True) if got is not None]


async def test_a_tenant_sees_only_its_own_entries(made: Made) -> None:
    store = made(BOUNDS)
    await store.put("a", "k00", value(1))
    assert await store.get("a", ["k00", "k01"]) == [value(1), None]
    assert await store.get("b", ["k00"]) == [None]
    assert not await store.delete("b", "k00")
    assert await store.delete("a", "k00")
    assert await store.get("a", ["k00"]) == [None]
    assert await store.bytes_of("a") == 0


async def test_a_tenant_over_its_bound_loses_its_own_oldest(made: Made) -> None:
    store = made(BOUNDS)
    await store.put("b", "k00", value(0))
    for i in range(8):
        await store.put("a", f"k{i:02d}", value(i))
        await asyncio.sleep(0.002)  # distinct use times on Redis's clock too
    assert await store.bytes_of("a") == 4 * COST
    assert await present(store, "a", [f"k{i:02d}" for i in range(8)]) == [
        "k04", "k05", "k06", "k07"]  # fmt: skip
    assert await present(store, "b", ["k00"]) == ["k00"]


async def test_a_read_keeps_an_entry_from_eviction(made: Made) -> None:
    store = made(BOUNDS)
    for i in range(4):
        await store.put("a", f"k{i:02d}", value(i))
        await asyncio.sleep(0.002)
    await store.get("a", ["k00"])  # now the most recently used
    await asyncio.sleep(0.002)
    await store.put("a", "k04", value(4))
    assert await present(store, "a", ["k00", "k01", "k02", "k03", "k04"]) == [
        "k00", "k02", "k03", "k04"]  # fmt: skip


async def test_a_full_store_evicts_the_largest_tenant_never_a_smaller_one(made: Made) -> None:
    store = made(BOUNDS)
    await store.put("small", "k00", value(0))
    await asyncio.sleep(0.002)
    for tenant in ("flood-1", "flood-2", "flood-3"):
        for i in range(4):
            await store.put(tenant, f"k{i:02d}", value(i))
            await asyncio.sleep(0.002)
    assert await present(store, "small", ["k00"]) == ["k00"]  # the oldest entry of all
    held = [await store.bytes_of(t) for t in ("small", "flood-1", "flood-2", "flood-3")]
    assert sum(held) <= BOUNDS.total_bytes
    assert held[0] == COST


async def test_an_entry_over_the_tenant_bound_is_refused_and_evicts_nothing(made: Made) -> None:
    store = made(BOUNDS)
    await store.put("a", "k00", value(0))
    with pytest.raises(StoreRefused):
        await store.put("a", "k01", b"x" * (4 * COST))
    assert await present(store, "a", ["k00", "k01"]) == ["k00"]


async def test_rewriting_a_key_replaces_its_bytes(made: Made) -> None:
    store = made(BOUNDS)
    await store.put("a", "k00", value(0))
    await store.put("a", "k00", value(1) * 2)
    assert await store.get("a", ["k00"]) == [value(1) * 2]
    assert await store.bytes_of("a") == COST + KB


async def test_an_entry_unused_for_the_ttl_is_gone(made: Made) -> None:
    store = made(Bounds(tenant_bytes=BOUNDS.tenant_bytes, total_bytes=BOUNDS.total_bytes,
                        ttl=0.05))  # fmt: skip
    if isinstance(store, MemoryTenantKV):
        store._clock.advance(0.1)  # type: ignore[attr-defined]
    await store.put("a", "k00", value(0))
    await _after_ttl(store, 0.1)
    assert await store.get("a", ["k00"]) == [None]
    await store.put("a", "k01", value(1))  # a write purges what expired
    await _after_ttl(store, 0.1)
    await store.put("b", "k00", value(0))
    assert await store.bytes_of("a") == 0


async def _after_ttl(store: Any, seconds: float) -> None:
    if isinstance(store, MemoryTenantKV):
        store._clock.advance(seconds)  # type: ignore[attr-defined]
    elif isinstance(store, SqliteTenantKV):
        store._wall = _later(store._wall, seconds)
    else:
        await asyncio.sleep(seconds)  # Redis's own clock: it moves only by waiting


def _later(wall: Callable[[], float], seconds: float) -> Callable[[], float]:
    return lambda: wall() + seconds
