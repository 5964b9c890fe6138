"""The one contract every `KV` store keeps, run against each of them: memory, SQLite, Redis and
Memcached (the real servers: skipped locally when missing, failures under CI=true).

What the cache layers rely on: a missing key is None; what was set comes back byte for byte
(empty, binary, several megabytes: over Memcached's 1 MiB item limit too); a later set wins;
delete removes (and deleting nothing is fine); any text is a key; and the TTL is honoured, read
through each store's own clock (advanced for memory and SQLite; the server's remaining TTL for
Redis and Memcached).
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from levergate.stores.kv import KV
from levergate.stores.kv_memcached import MemcachedKV
from levergate.stores.kv_memory import MemoryKV
from levergate.stores.kv_redis import RedisKV
from levergate.stores.kv_sqlite import SqliteKV
from levergate.testing import ManualClock
from tests.memcached_required import require_memcached
from tests.redis_required import require_redis

REDIS_URL = "redis://127.0.0.1:6379/0"
BACKENDS = ["memory", "sqlite", "redis", "memcached"]


@dataclass
class Subject:
    store: KV
    # Seconds the store would still keep `key` for (None: gone), as the store itself sees it.
    remaining: Callable[[str], Awaitable[float | None]]


def memcached_remaining(address: str, key: str) -> float | None:
    """The server's own remaining TTL of `key` (meta get with the `t` flag)."""
    host, _, port = address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=2) as conn:
        conn.sendall(f"mg {key} t\r\n".encode())
        reply = conn.recv(256).decode()
    if reply.startswith("EN"):
        return None
    return float(reply.split()[1].removeprefix("t"))


@pytest.fixture(params=BACKENDS)
async def subject(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Subject]:
    backend = request.param
    prefix = f"levergate:test:{uuid.uuid4().hex}:"
    if backend in ("memory", "sqlite"):
        clock = ManualClock(start=1000.0)
        if backend == "memory":
            store: KV = MemoryKV(max_bytes=64 << 20, clock=clock)
        else:
            store = SqliteKV(tmp_path / "kv.sqlite3", wall=clock.now)

        async def advanced(key: str) -> float | None:
            """Seconds until `key` is gone, found by letting the store's clock run."""
            for waited in range(1, 4000):
                clock.advance(1)
                if await store.get(key) is None:
                    return float(waited)
            return None

        yield Subject(store, advanced)
        if isinstance(store, SqliteKV):
            await store.aclose()
    elif backend == "redis":
        await require_redis(REDIS_URL)
        redis = RedisKV(url=REDIS_URL, prefix=prefix, timeout=2.0)
        client = aioredis.Redis.from_url(REDIS_URL)

        async def pttl(key: str) -> float | None:
            left = await client.pttl(prefix + key)
            return None if left < 0 else left / 1000

        yield Subject(redis, pttl)
        await redis.aclose()
        keys = [k async for k in client.scan_iter(match=prefix + "*")]
        if keys:
            await client.delete(*keys)
        await client.aclose()
    else:
        address = require_memcached()
        host, _, port = address.rpartition(":")
        memcached = MemcachedKV(host=host, port=int(port), prefix=prefix, timeout=2.0,
                                item_bytes=1 << 20, connections=2)  # fmt: skip

        async def mg(key: str) -> float | None:
            return memcached_remaining(address, memcached._key(key))

        yield Subject(memcached, mg)
        await memcached.aclose()


async def test_a_missing_key_is_none(subject: Subject) -> None:
    assert await subject.store.get("never-set") is None


async def test_values_come_back_byte_for_byte(subject: Subject) -> None:
    values = {"empty": b"", "binary": bytes(range(256)) * 4, "big": bytes(3 << 20) + b"end"}
    for key, value in values.items():
        await subject.store.set(key, value, ttl=60)
    for key, value in values.items():
        assert await subject.store.get(key) == value


async def test_a_later_set_wins_and_delete_removes(subject: Subject) -> None:
    store = subject.store
    await store.set("k", b"first", ttl=60)
    await store.set("k", b"second", ttl=60)
    assert await store.get("k") == b"second"
    await store.set("k", bytes(2 << 20), ttl=60)  # a small value replaced by a split one
    await store.set("k", b"small again", ttl=60)
    assert await store.get("k") == b"small again"
    await store.delete("k")
    assert await store.get("k") is None
    await store.delete("k")  # deleting nothing is no error


async def test_any_text_is_a_key(subject: Subject) -> None:
    keys = ["with spaces and\nnewlines", "ünïcødé ключ 鍵", "x" * 1000, "\x00\x7f"]
    for i, key in enumerate(keys):
        await subject.store.set(key, f"v{i}".encode(), ttl=60)
    for i, key in enumerate(keys):
        assert await subject.store.get(key) == f"v{i}".encode()


async def test_the_ttl_is_honoured(subject: Subject) -> None:
    await subject.store.set("short", b"v", ttl=30)
    remaining = await subject.remaining("short")
    assert remaining is not None
    assert 25 <= remaining <= 31
    await subject.store.set("sub-second", b"v", ttl=0.2)  # never "no expiry"
    remaining = await subject.remaining("sub-second")
    assert remaining is None or remaining <= 1.0


async def test_a_ttl_past_30_days_is_kept_not_expired(subject: Subject) -> None:
    """Memcached reads an expiry over 30 days as a Unix time: sent as seconds, 40 days would
    be a date in 1970, and the entry would be gone at once."""
    await subject.store.set("long", b"v", ttl=40 * 24 * 3600)
    assert await subject.store.get("long") == b"v"
    if not isinstance(subject.store, MemoryKV | SqliteKV):  # the clock-run check is too slow
        remaining = await subject.remaining("long")
        assert remaining is not None
        assert remaining > 39 * 24 * 3600
