"""The key stores (memory, SQLite, Redis) behave alike, and none holds a key in plaintext. The
Redis cases need Redis at 127.0.0.1:6379: skipped with a reason outside CI, failed under CI."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from levergate.config import KeyPolicySettings
from levergate.layers.keys.keyring import Keyring
from levergate.stores.keys import (
    KeyRecord,
    KeyStore,
    KeyStoreError,
    MemoryKeyStore,
    hash_key,
    new_key,
)
from levergate.stores.keys_redis import RedisKeyStore
from levergate.stores.keys_sqlite import SqliteKeyStore
from levergate.stores.redis_calls import redis_client
from levergate.testing import ManualClock
from tests.redis_required import require_redis

REDIS_URL = "redis://127.0.0.1:6379/15"


@pytest.fixture(params=["memory", "sqlite", "redis"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[KeyStore]:
    made: MemoryKeyStore | SqliteKeyStore | RedisKeyStore
    if request.param == "memory":
        made = MemoryKeyStore()
    elif request.param == "sqlite":
        made = SqliteKeyStore(tmp_path / "keys.sqlite3", busy_timeout=1.0)
    else:
        await require_redis(REDIS_URL)
        client = redis_client(url=REDIS_URL, timeout=1.0, what="test")
        prefix = f"test:{{{uuid.uuid4().hex}}}:"
        made = RedisKeyStore(client, prefix=prefix)
    yield made
    await made.aclose()
    if request.param == "redis":
        await forget(prefix)


async def forget(prefix: str) -> None:
    """Key records never expire: drop the test's own."""
    raw = Redis.from_url(REDIS_URL)
    names = [n async for n in raw.scan_iter(match=prefix.replace("{", "[{]") + "*")]
    if names:
        await raw.delete(*names)
    await raw.aclose()


def record(
    key: str, *, key_id: str = "key_1", tenant: str = "acme", created: float = 1.0
) -> KeyRecord:
    return KeyRecord(id=key_id, hash=hash_key(key), tenant=tenant, created=created, models=("m",))


async def test_a_record_is_found_by_its_hash_and_listed_by_tenant(store: KeyStore) -> None:
    await store.put(record("lg-one", key_id="a", created=1.0))
    await store.put(record("lg-two", key_id="b", tenant="other", created=2.0))
    await store.put(record("lg-three", key_id="c", created=3.0))
    found = await store.get(hash_key("lg-one"))
    assert found == record("lg-one", key_id="a", created=1.0)
    assert await store.get(hash_key("lg-unknown")) is None
    assert [r.id for r in await store.list("acme")] == ["a", "c"]
    assert [r.id for r in await store.list()] == ["a", "b", "c"]


async def test_a_put_with_a_new_hash_retires_the_old_one(store: KeyStore) -> None:
    await store.put(record("lg-old"))
    await store.put(record("lg-new"))
    assert await store.get(hash_key("lg-old")) is None
    assert (await store.get(hash_key("lg-new"))) == record("lg-new")
    assert len(await store.list()) == 1


async def test_no_key_is_kept_in_plaintext(tmp_path: Path) -> None:
    path = tmp_path / "keys.sqlite3"
    store = SqliteKeyStore(path, busy_timeout=1.0)
    keyring = Keyring(config_keys=[], store=store, clock=ManualClock(), cache_seconds=0, timeout=1)
    made, key = await keyring.create(tenant="acme", name="ci", policy=KeyPolicySettings())
    _rotated, new = await keyring.rotate(made.id)
    await store.aclose()
    written = b"".join(p.read_bytes() for p in tmp_path.iterdir())
    assert key.startswith("lg-")
    assert new.startswith("lg-")
    assert key != new
    assert hash_key(new).encode() in written
    assert key.encode() not in written
    assert new.encode() not in written
    assert new[3:].encode() not in written


async def test_redis_holds_only_digests() -> None:
    await require_redis(REDIS_URL)
    prefix = f"test:{{{uuid.uuid4().hex}}}:"
    store = RedisKeyStore(redis_client(url=REDIS_URL, timeout=1.0, what="t"), prefix=prefix)
    keyring = Keyring(config_keys=[], store=store, clock=ManualClock(), cache_seconds=0, timeout=1)
    _, key = await keyring.create(tenant="acme", name="ci", policy=KeyPolicySettings(rpm=5))
    await store.aclose()
    raw = Redis.from_url(REDIS_URL)
    try:
        names = [n async for n in raw.scan_iter(match=prefix.replace("{", "[{]") + "*")]
        values = [await raw.dump(n) for n in names]
        assert len(names) == 3
        assert all(key.encode() not in (v or b"") + n for n, v in zip(names, values, strict=True))
    finally:
        await raw.aclose()
        await forget(prefix)


async def test_an_unreadable_sqlite_file_is_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "keys.sqlite3"
    path.write_bytes(b"not a database" * 100)
    store = SqliteKeyStore(path, busy_timeout=0.1)
    with pytest.raises(KeyStoreError):
        await store.get(hash_key(new_key()))
    await store.aclose()


def test_records_written_by_a_newer_gateway_still_read_and_garbage_is_a_store_error() -> None:
    newer = b'{"id": "k", "hash": "h", "tenant": "t", "models": ["m"], "added_later": 1}'
    assert KeyRecord.from_bytes(newer) == KeyRecord(id="k", hash="h", tenant="t", models=("m",))
    for garbage in (b"[1]", b"{", b'{"id": "k"}', b'"text"'):
        with pytest.raises(KeyStoreError):
            KeyRecord.from_bytes(garbage)
