"""The ResponseStore on each backend: a response is its tenant's alone, each turn is stored once
and a conversation read back through the ids of its earlier turns, the bounds hold, and a store
that fails fails the request (503) instead of losing the conversation silently."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from levergate.config import ResponsesSettings, Settings
from levergate.errors import NotFound, Overloaded
from levergate.stores.kv import StoreError
from levergate.stores.registry import StoreRegistry
from levergate.stores.responses import STRIDE, ResponseStore, StoredResponse, build_response_store
from levergate.stores.tenant_kv import Bounds, MemoryTenantKV
from levergate.testing import ManualClock
from tests.redis_required import require_redis
from tests.unit.stores.test_tenant_kv import _purge

REDIS_URL = "redis://127.0.0.1:6379/0"


def record(tenant: str = "a", text: str = "hi") -> StoredResponse:
    return StoredResponse(tenant=tenant, response={"id": "resp_1", "object": "response"},
                          input=[{"role": "user", "content": text}])  # fmt: skip


def answer(response_id: str, text: str) -> dict[str, Any]:
    output = [{"type": "message", "role": "assistant",
               "content": [{"type": "output_text", "text": text}]}]  # fmt: skip
    return {"id": response_id, "object": "response", "output": output}


def built(tmp_path: Path, backend: str, prefix: str) -> tuple[ResponseStore, StoreRegistry]:
    store = {"backend": backend, "sqlite_path": str(tmp_path / "r.sqlite3"),
             "redis_prefix": prefix}  # fmt: skip
    settings = Settings.load(responses={"store": store})
    registry = StoreRegistry(settings)
    return build_response_store(settings, clock=ManualClock(), registry=registry), registry


@pytest.fixture(params=["memory", "sqlite", "redis"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ResponseStore]:
    if request.param == "redis":
        await require_redis(REDIS_URL)
    prefix = f"levergate-test:{{resp-{uuid.uuid4().hex}}}:"
    made, registry = built(tmp_path, request.param, prefix)
    yield made
    await made.aclose()
    await registry.aclose()
    if request.param == "redis":
        await _purge(REDIS_URL, prefix)


async def test_a_response_is_found_by_its_tenant_only(store: ResponseStore) -> None:
    kept = record()
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


async def chain(store: ResponseStore, turns: int, *, tenant: str = "a") -> StoredResponse:
    """A conversation of `turns` turns, each saying its number; the last turn."""
    previous: tuple[str, StoredResponse] | None = None
    for n in range(turns):
        turn = StoredResponse.turn(tenant=tenant, response=answer(f"resp_{n}", f"out {n}"),
                                   input=[{"role": "user", "content": f"in {n}"}],
                                   previous=previous)  # fmt: skip
        assert await store.save(f"resp_{n}", turn)
        previous = (f"resp_{n}", turn)
    assert previous is not None
    return previous[1]


async def test_a_long_conversation_reads_back_whole_and_in_order(store: ResponseStore) -> None:
    turns = 2 * STRIDE + 5  # three rounds of earlier ids
    last = await chain(store, turns)
    assert (last.depth, last.items, len(last.earlier)) == (turns, 2 * turns, STRIDE)
    items = await store.conversation(last, tenant="a")
    texts = [i["content"] if i.get("role") == "user" else i["content"][0]["text"] for i in items]
    assert texts == [t for n in range(turns) for t in (f"in {n}", f"out {n}")]


async def test_each_turn_is_stored_once_not_the_conversation_again() -> None:
    kv = MemoryTenantKV(bounds=Bounds(1 << 30, 1 << 30, ttl=60), clock=ManualClock())
    store = ResponseStore(kv, settings=ResponsesSettings(), timeout=1)
    big = StoredResponse.turn(tenant="a", response=answer("resp_big", "ok"),
                              input=[{"role": "user", "content": "x" * 1_000_000}],
                              previous=None)  # fmt: skip
    await store.save("resp_big", big)
    before = await kv.bytes_of("a")
    previous = ("resp_big", big)
    for n in range(20):  # 20 small turns continuing a 1 MB conversation
        turn = StoredResponse.turn(tenant="a", response=answer(f"resp_{n}", "ok"),
                                   input=[{"role": "user", "content": "more"}],
                                   previous=previous)  # fmt: skip
        await store.save(f"resp_{n}", turn)
        previous = (f"resp_{n}", turn)
    assert await kv.bytes_of("a") - before < 20 * 4096  # not 20 MB
    assert len(await store.conversation(previous[1], tenant="a")) == 42


async def test_a_large_conversation_is_decoded_with_the_loop_given_back() -> None:
    """A conversation of 8 turns of 1 MB each was one 8 MB parse in which no other request on
    the loop moved (the soak, issue 20): the loop gets a turn between megabytes."""
    kv = MemoryTenantKV(bounds=Bounds(1 << 30, 1 << 30, ttl=60), clock=ManualClock())
    store = ResponseStore(kv, settings=ResponsesSettings(), timeout=1)
    previous: tuple[str, StoredResponse] | None = None
    for n in range(8):
        turn = StoredResponse.turn(tenant="a", response=answer(f"resp_{n}", "ok"),
                                   input=[{"role": "user", "content": str(n) * 1_100_000}],
                                   previous=previous)  # fmt: skip
        assert await store.save(f"resp_{n}", turn)
        previous = (f"resp_{n}", turn)
    assert previous is not None
    ticks = 0
    reading = True

    async def ticker() -> None:
        nonlocal ticks
        while reading:
            ticks += 1
            await asyncio.sleep(0)

    beside = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    started = ticks
    items = await store.conversation(previous[1], tenant="a")
    reading = False
    await beside
    assert len(items) == 16
    assert ticks - started >= 6  # a turn for the loop after each megabyte decoded


async def test_a_gone_earlier_turn_is_a_404_naming_it(store: ResponseStore) -> None:
    last = await chain(store, 4)
    assert await store.delete("resp_1", tenant="a")
    with pytest.raises(NotFound) as raised:
        await store.conversation(last, tenant="a")
    assert "resp_1" in raised.value.message
    assert raised.value.code == "previous_response_not_found"


async def test_another_tenant_cannot_read_a_chain_through_its_ids(store: ResponseStore) -> None:
    last = await chain(store, 3)
    forged = StoredResponse.turn(tenant="b", response=answer("resp_b", "x"), input=[],
                                 previous=("resp_2", last))  # fmt: skip
    with pytest.raises(NotFound):
        await store.conversation(forged, tenant="b")


async def test_a_response_unused_for_the_ttl_expires() -> None:
    clock = ManualClock()
    kv = MemoryTenantKV(bounds=Bounds(1 << 20, 1 << 20, ttl=60), clock=clock)
    store = ResponseStore(kv, settings=ResponsesSettings(ttl_seconds=60), timeout=1)
    await store.save("resp_1", record())
    clock.advance(59)
    assert await store.load("resp_1", tenant="a") is not None  # read: kept 60 s more
    clock.advance(59)
    assert await store.load("resp_1", tenant="a") is not None
    clock.advance(61)
    assert await store.load("resp_1", tenant="a") is None


async def test_a_response_over_the_size_cap_or_the_tenant_bound_is_not_kept() -> None:
    kv = MemoryTenantKV(bounds=Bounds(8192, 1 << 20, ttl=60), clock=ManualClock())
    store = ResponseStore(kv, settings=ResponsesSettings(max_stored_bytes=2048), timeout=1)
    assert not await store.save("resp_1", record(text="x" * 4096))
    store = ResponseStore(kv, settings=ResponsesSettings(), timeout=1)
    assert not await store.save("resp_2", record(text="x" * 9000))
    assert await store.save("resp_3", record())
    assert await store.load("resp_1", tenant="a") is None
    assert await store.load("resp_2", tenant="a") is None


class BrokenKV:
    async def put(self, tenant: str, key: str, value: bytes) -> None:
        raise StoreError("down")

    async def get(self, tenant: str, keys: Any) -> list[bytes | None]:
        raise StoreError("down")

    async def delete(self, tenant: str, key: str) -> bool:
        raise StoreError("down")


async def test_a_store_that_fails_is_a_503_not_a_lost_conversation() -> None:
    store = ResponseStore(BrokenKV(), settings=ResponsesSettings(), timeout=1)
    with pytest.raises(Overloaded) as raised:
        await store.load("resp_1", tenant="a")
    assert raised.value.code == "response_store_unavailable"


async def test_garbage_in_the_store_reads_as_absent() -> None:
    kv = MemoryTenantKV(bounds=Bounds(1 << 20, 1 << 20, ttl=60), clock=ManualClock())
    await kv.put("a", "resp_1", b"not json")
    store = ResponseStore(kv, settings=ResponsesSettings(), timeout=1)
    assert await store.load("resp_1", tenant="a") is None


def test_auto_follows_the_shared_stores() -> None:
    def backend(**values: Any) -> str:
        settings = Settings.load(**values)
        store = build_response_store(settings, clock=ManualClock(),
                                     registry=StoreRegistry(settings))  # fmt: skip
        return type(store._kv).__name__

    assert backend() == "MemoryTenantKV"
    assert backend(cache={"store": {"backend": "redis"}}) == "RedisTenantKV"
    assert backend(traffic={"store": "redis"}) == "RedisTenantKV"
