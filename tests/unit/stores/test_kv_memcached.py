"""Memcached as the cache store, against real `memcached` processes: values over the item limit
split (or refused with no cool-down when the server's limit is smaller than configured), a
server that is down or restarts costs misses and never a failed request, a cancelled command
never leaves its reply for the next caller, and the gateway selects it from settings."""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest

from levergate.config import CacheStoreSettings, Settings
from levergate.layers.cache.entries import CACHE_HEADER
from levergate.layers.cache.stats import CacheStats
from levergate.stores import select
from levergate.stores.build import build_store
from levergate.stores.kv import SafeKV
from levergate.stores.kv_memcached import MAX_RELATIVE_TTL, MAX_UNIX_TIME, MemcachedKV, expiry
from levergate.stores.registry import StoreRegistry
from levergate.testing import FakeUpstream, ManualClock, sample_value
from tests.memcached_required import PrivateMemcached, require_memcached
from tests.unit.layers.cache.helpers import chat, exact_cache


def store_at(address: str, *, item_bytes: int = 1 << 20, timeout: float = 1.0) -> MemcachedKV:
    host, _, port = address.rpartition(":")
    return MemcachedKV(host=host, port=int(port), prefix=f"lg:test:{uuid.uuid4().hex}:",
                       timeout=timeout, item_bytes=item_bytes, connections=4)  # fmt: skip


def safe(inner: MemcachedKV, clock: ManualClock, stats: CacheStats) -> SafeKV:
    return SafeKV(inner, name="memcached", timeout=1.0, cooldown=5, max_value_bytes=64 << 20,
                  clock=clock, on_fault=stats.fault)  # fmt: skip


@pytest.fixture
def private() -> Iterator[PrivateMemcached]:
    server = PrivateMemcached(item_bytes=512 * 1024)  # the smallest -I with default slabs
    server.start()
    yield server
    server.stop()


@pytest.fixture
async def shared() -> AsyncIterator[MemcachedKV]:
    store = store_at(require_memcached())
    yield store
    await store.aclose()


def test_expiry_is_whole_seconds_and_a_unix_time_past_30_days() -> None:
    assert expiry(0.001, now=5e8) == 1  # 0 would mean "never expires"
    assert expiry(29.2, now=5e8) == 30
    assert expiry(MAX_RELATIVE_TTL, now=5e8) == MAX_RELATIVE_TTL
    assert expiry(MAX_RELATIVE_TTL + 1, now=1.7e9) == int(1.7e9) + MAX_RELATIVE_TTL + 1
    for endless in (1e20, float("inf"), float("nan")):
        assert expiry(endless, now=1.7e9) == MAX_UNIX_TIME


async def test_a_value_over_the_item_limit_is_split_and_whole_again(
    private: PrivateMemcached,
) -> None:
    store = store_at(private.address, item_bytes=private.item_bytes)
    try:
        value = random.Random(1).randbytes(2_000_000)  # 4 items of 512 KiB
        await store.set("big", value, ttl=60)
        assert await store.get("big") == value
        await store.delete("big")
        assert await store.get("big") is None
    finally:
        await store.aclose()


async def test_an_evicted_chunk_is_a_miss_not_a_wrong_value(private: PrivateMemcached) -> None:
    store = store_at(private.address, item_bytes=private.item_bytes)
    try:
        await store.set("big", bytes(1_500_000), ttl=60)
        chunk = f"{store._key('big')}:"
        client = store._client
        manifest = client.get(store._key("big"))
        generation = manifest[1][:8].hex()
        assert client.delete(f"{chunk}{generation}:2")
        assert await store.get("big") is None
    finally:
        await store.aclose()


async def test_a_server_with_a_smaller_item_limit_refuses_without_a_cool_down(
    private: PrivateMemcached,
) -> None:
    """Configured for 1 MiB items against a server started with 512 KiB: the server refuses the
    one value (SERVER_ERROR object too large), which must not cool the store down for all."""
    clock, stats = ManualClock(), CacheStats()
    inner = store_at(private.address, item_bytes=1 << 20)
    store = safe(inner, clock, stats)
    try:
        await store.set("victim", b"answer", ttl=60)
        await store.set("too-big", bytes(800_000), ttl=60)
        assert sample_value(stats.faults, "memcached", "set", "refused") == 1
        assert await store.get("too-big") is None
        assert await store.get("victim") == b"answer"
        assert sample_value(stats.faults, "memcached", "get", "cooling_down") == 0
    finally:
        await inner.aclose()


async def test_a_down_then_restarted_memcached_is_misses_then_hits_again(
    private: PrivateMemcached,
) -> None:
    clock, stats = ManualClock(), CacheStats()
    inner = store_at(private.address, timeout=0.5)
    upstream = FakeUpstream()
    cache, _ = exact_cache(upstream, store=safe(inner, clock, stats), stats=stats)
    try:
        await cache(chat())
        assert (await cache(chat())).headers[CACHE_HEADER] == "hit"
        private.stop()
        assert (await cache(chat())).headers[CACHE_HEADER] == "miss"  # down: a miss, answered
        assert sample_value(stats.faults, "memcached", "get", "error") == 1
        private.start()  # restarted: empty, and the pooled sockets are dead
        clock.advance(6)  # past the cool-down
        assert (await cache(chat())).headers[CACHE_HEADER] == "miss"
        assert (await cache(chat())).headers[CACHE_HEADER] == "hit"
        assert len(upstream.calls) == 3
    finally:
        await inner.aclose()


async def test_a_cancelled_get_never_leaves_its_reply_for_the_next_caller(
    shared: MemcachedKV,
) -> None:
    """aiomcache puts a connection back with a cancelled get's reply unread: the next get on
    it reads that reply instead of its own (a miss, or a value the key had before it was
    overwritten), and so on for as long as the connection lives. Cancelled at every point of a
    get here (after 0 to 3 loop turns, or a few microseconds), then the key is overwritten:
    every later read must see the new value."""
    rng = random.Random(7)
    for round_ in range(120):
        key = f"k{round_ % 8}"
        await shared.set(key, b"old " * 500, ttl=60)
        task = asyncio.ensure_future(shared.get(key))
        for _ in range(round_ % 4):
            await asyncio.sleep(0)
        if round_ % 5 == 4:
            await asyncio.sleep(rng.uniform(0, 0.0002))
        task.cancel()
        await shared.set(key, f"new {round_}".encode(), ttl=60)
        assert await shared.get(key) == f"new {round_}".encode()


async def test_the_gateway_builds_a_memcached_store_from_settings() -> None:
    address = require_memcached()
    settings = CacheStoreSettings(backend="memcached", memcached_address=address,
                          memcached_prefix=f"lg:test:{uuid.uuid4().hex}:")  # fmt: skip
    root = Settings.load(cache={"store": settings.model_dump()})
    registry = StoreRegistry(root)
    built = build_store(settings, choice=select.cache_store(root), registry=registry,
                        clock=ManualClock(), on_fault=CacheStats().fault)  # fmt: skip
    try:
        await built.kv.set("k", b"v", ttl=60)
        assert await built.kv.get("k") == b"v"
    finally:
        await built.aclose()
        await registry.aclose()


@pytest.mark.parametrize(
    "values",
    [{"memcached_address": "127.0.0.1"}, {"memcached_address": "a b:1"},
     {"memcached_prefix": "has space"}, {"memcached_item_bytes": 10}],
)  # fmt: skip
def test_bad_memcached_settings_are_refused(values: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="memcached"):
        CacheStoreSettings(**values)  # type: ignore[arg-type]
