"""The ResponseStore on each backend: a response is its tenant's alone, expires, is bounded, and
a store that fails fails the request (503) instead of losing the conversation silently."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from levergate.config import ResponsesSettings, Settings
from levergate.errors import Overloaded
from levergate.stores.kv import StoreError
from levergate.stores.kv_memory import MemoryKV
from levergate.stores.responses import ResponseStore, StoredResponse, build_response_store
from levergate.testing import ManualClock
from tests.redis_required import require_redis

REDIS_URL = "redis://127.0.0.1:6379/0"


def record(tenant: str = "a", **extra: Any) -> StoredResponse:
    return StoredResponse(tenant=tenant, response={"id": "resp_1", "object": "response"},
                          input=[{"role": "user", "content": "hi"}], **extra)  # fmt: skip


def built(tmp_path: Path, backend: str) -> ResponseStore:
    store = {"backend": backend, "sqlite_path": str(tmp_path / "r.sqlite3"),
             "redis_prefix": f"levergate-test:{uuid.uuid4().hex}:"}  # fmt: skip
    settings = Settings.load(responses={"store": store})
    return build_response_store(settings, clock=ManualClock())


@pytest.fixture(params=["memory", "sqlite", "redis"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ResponseStore]:
    if request.param == "redis":
        await require_redis(REDIS_URL)
    made = built(tmp_path, request.param)
    yield made
    await made.aclose()


async def test_a_response_is_found_by_its_tenant_only(store: ResponseStore) -> None:
    kept = record(conversation=[{"role": "user", "content": "hi"}])
    assert await store.save("resp_1", kept)
    assert await store.load("resp_1", tenant="a") == kept
    assert await store.load("resp_1", tenant="b") is None
    assert await store.load("resp_unknown", tenant="a") is None


async def test_only_its_tenant_deletes_it(store: ResponseStore) -> None:
    await store.save("resp_1", record())
    assert not await store.delete("resp_1", tenant="b")
    assert await store.load("resp_1", tenant="a") is not None
    assert await store.delete("resp_1", tenant="a")
    assert await store.load("resp_1", tenant="a") is None


async def test_a_response_expires_after_the_ttl() -> None:
    clock = ManualClock()
    settings = ResponsesSettings(ttl_seconds=60)
    store = ResponseStore(MemoryKV(max_bytes=1 << 20, clock=clock), settings=settings, timeout=1)
    await store.save("resp_1", record())
    clock.advance(59)
    assert await store.load("resp_1", tenant="a") is not None
    clock.advance(2)
    assert await store.load("resp_1", tenant="a") is None


async def test_a_response_over_the_size_cap_is_not_kept() -> None:
    settings = ResponsesSettings(max_stored_bytes=2048)
    store = ResponseStore(MemoryKV(max_bytes=1 << 20, clock=ManualClock()), settings=settings,
                          timeout=1)  # fmt: skip
    big = record(conversation=[{"role": "user", "content": "x" * 4096}])
    assert not await store.save("resp_1", big)
    assert await store.load("resp_1", tenant="a") is None


class BrokenKV:
    async def get(self, key: str) -> bytes | None:
        raise StoreError("down")

    async def set(self, key: str, value: bytes, *, ttl: float) -> None:
        raise StoreError("down")

    async def delete(self, key: str) -> None:
        raise StoreError("down")


async def test_a_store_that_fails_is_a_503_not_a_lost_conversation() -> None:
    store = ResponseStore(BrokenKV(), settings=ResponsesSettings(), timeout=1)
    with pytest.raises(Overloaded) as raised:
        await store.load("resp_1", tenant="a")
    assert raised.value.code == "response_store_unavailable"


async def test_garbage_in_the_store_reads_as_absent() -> None:
    kv = MemoryKV(max_bytes=1 << 20, clock=ManualClock())
    await kv.set("resp_1", b"not json", ttl=60)
    store = ResponseStore(kv, settings=ResponsesSettings(), timeout=1)
    assert await store.load("resp_1", tenant="a") is None


def test_auto_follows_the_shared_stores() -> None:
    def backend(**values: Any) -> str:
        store = build_response_store(Settings.load(**values), clock=ManualClock())
        return type(store._kv).__name__

    assert backend() == "MemoryKV"
    assert backend(cache={"store": {"backend": "redis"}}) == "RedisKV"
    assert backend(traffic={"store": "redis"}) == "RedisKV"
