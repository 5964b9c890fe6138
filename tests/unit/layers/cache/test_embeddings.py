"""EmbeddingsCache: each input cached alone; only the missing inputs go upstream, in order."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from levergate.config import CacheRuleSettings, CacheSettings
from levergate.core.call import Call, Context
from levergate.core.controls import CachePolicy, Controls
from levergate.core.reply import Completed, Reply
from levergate.errors import BadRequest, PayloadTooLarge
from levergate.layers.cache import embeddings as embeddings_module
from levergate.layers.cache.embeddings import HITS_HEADER, EmbeddingsCache
from levergate.layers.cache.entries import CACHE_HEADER, CacheView, Entries
from levergate.layers.cache.stats import CacheStats
from levergate.policies.fingerprint import fingerprint
from levergate.stores.kv_memory import MemoryKV
from levergate.testing import ManualClock


class Embeddings:
    """An upstream that embeds a text as [len(text), first letter code] and counts inputs."""

    def __init__(self) -> None:
        self.inputs: list[Any] = []

    async def __call__(self, call: Call) -> Reply:
        items = call.body["input"]
        items = [items] if isinstance(items, str) else items
        self.inputs.append(list(items))
        data = [
            {
                "object": "embedding",
                "index": i,
                "embedding": [float(len(t)), float(ord(t[0]) if isinstance(t, str) else t[0])],
            }
            for i, t in enumerate(items)
        ]
        usage = {"prompt_tokens": len(items), "total_tokens": len(items)}
        # Out of order on purpose: the cache must use `index`.
        return Completed(orjson.dumps({"object": "list", "data": data[::-1], "model": "e",
                                       "usage": usage}))  # fmt: skip


def embed(value: Any, **body: Any) -> Call:
    return Call(kind="embedding", body={"model": "e", "input": value, **body}, ctx=Context("r"))


def layer(upstream: Embeddings, settings: CacheSettings | None = None) -> EmbeddingsCache:
    stats = CacheStats()
    entries = Entries(MemoryKV(max_bytes=1_000_000, clock=ManualClock()), cache="embeddings",
                      stats=stats)  # fmt: skip
    view = CacheView(settings or CacheSettings(), entries, stats, resolve=lambda a, _feature: a)
    return EmbeddingsCache(upstream, view=view)


def vectors(reply: Reply) -> list[list[float]]:
    assert isinstance(reply, Completed)
    rows = sorted(reply.data["data"], key=lambda row: row["index"])
    return [row["embedding"] for row in rows]


async def test_only_missing_inputs_go_upstream_and_order_is_kept() -> None:
    upstream = Embeddings()
    cache = layer(upstream)
    first = await cache(embed(["apple", "kiwi"]))
    assert vectors(first) == [[5.0, 97.0], [4.0, 107.0]]
    second = await cache(embed(["kiwi", "banana", "kiwi", "apple"]))
    assert upstream.inputs == [["apple", "kiwi"], ["banana"]]
    assert vectors(second) == [[4.0, 107.0], [6.0, 98.0], [4.0, 107.0], [5.0, 97.0]]
    assert second.headers[HITS_HEADER] == "3/4"
    assert isinstance(second, Completed)
    assert [row["index"] for row in second.data["data"]] == [0, 1, 2, 3]
    assert second.data["usage"]["prompt_tokens"] == 1
    full = await cache(embed("banana"))
    assert full.headers[CACHE_HEADER] == "hit"
    assert vectors(full) == [[6.0, 98.0]]
    assert len(upstream.inputs) == 2


async def test_shaping_fields_and_controls_are_respected() -> None:
    upstream = Embeddings()
    cache = layer(upstream)
    await cache(embed("apple"))
    await cache(embed("apple", dimensions=1))
    await cache(embed("apple", encoding_format="base64"))
    assert len(upstream.inputs) == 3
    await cache(embed("apple", user="someone-else"))
    assert len(upstream.inputs) == 3
    off = layer(upstream, CacheSettings(models={"e": CacheRuleSettings(mode="off")}))
    assert (await off(embed("apple"))).headers[CACHE_HEADER] == "bypass; reason=off"
    no_store = Controls(cache=CachePolicy(store=False))
    await cache(Call(kind="embedding", body={"model": "e", "input": "pear"},
                     ctx=Context("r", controls=no_store)))  # fmt: skip
    await cache(embed("pear"))
    assert upstream.inputs[-2:] == [["pear"], ["pear"]]


async def test_copies_of_one_input_cannot_amplify_the_response() -> None:
    """Each copy of a cached input costs the upstream nothing but a full vector here: 20,000
    copies of "a" made a 651 MB response. Beyond the configured bytes the cache refuses with a
    413 before building the response, and before the upstream when the copies are cached."""
    upstream = Embeddings()
    cache = layer(
        upstream, CacheSettings(embeddings_max_response_bytes=4096, embeddings_max_copies=1000)
    )
    with pytest.raises(PayloadTooLarge) as caught:
        await cache(embed(["a"] * 100))  # one input upstream, 100 vectors back
    assert caught.value.http_status == 413
    assert caught.value.param == "input"
    assert upstream.inputs == [["a"]]
    with pytest.raises(PayloadTooLarge):
        await cache(embed(["a"] * 99 + ["b"]))  # "a" is cached now: refused before upstream
    assert upstream.inputs == [["a"]]
    assert len(vectors(await cache(embed(["a"] * 10 + ["c"])))) == 11


async def test_copies_beyond_the_bound_per_distinct_input_are_refused_before_any_work() -> None:
    """Issue 20: 2,048 x "a" (10 KB in, one input upstream) made a 66.7 MB answer. The answer
    is bounded by what the client sent: at most `embeddings_max_copies` inputs per distinct one,
    refused (400, naming the bound) before a fingerprint is taken or anything goes upstream."""
    upstream = Embeddings()
    cache = layer(upstream, CacheSettings(embeddings_max_copies=16))
    for refused in (["a"] * 2048, ["a"] * 17, ["a"] * 40 + ["b"] * 5, [[1, 2]] * 17):
        with pytest.raises(BadRequest) as caught:
            await cache(embed(refused))
        assert caught.value.code == "too_many_copies"
        assert caught.value.param == "input"
        assert "at most 16 inputs per distinct input" in caught.value.message
    assert upstream.inputs == []
    assert len(vectors(await cache(embed(["a"] * 16)))) == 16
    assert len(vectors(await cache(embed(["a"] * 20 + ["b"] * 12)))) == 32
    assert upstream.inputs == [["a"], ["b"]]


async def test_an_assembled_answer_is_kept_in_parts_with_its_usage() -> None:
    """The answer the cache puts together is handed up in parts (the cached vectors' own
    bytes, shared by every copy) with its usage: the edge sends the parts in chunks, and
    reading the usage parses nothing."""
    upstream = Embeddings()
    cache = layer(upstream)
    await cache(embed(["apple", "kiwi"]))
    reply = await cache(embed(["kiwi", "apple", "kiwi", "banana"]))
    assert isinstance(reply, Completed)
    assert len(reply.parts) > 1
    assert reply.usage == {"prompt_tokens": 1, "total_tokens": 1}
    assert len(reply.parts) > 1  # the usage came without joining, let alone parsing
    assert reply.size == len(b"".join(reply.parts))
    whole = orjson.loads(b"".join(reply.parts))
    assert [row["embedding"] for row in whole["data"]] == [
        [4.0, 107.0], [5.0, 97.0], [4.0, 107.0], [6.0, 98.0]]  # fmt: skip
    assert whole["model"] == "e"
    assert whole["usage"] == reply.usage
    assert reply.raw == b"".join(reply.parts)


class Counting:
    """A store (the real in-memory one) that records how many operations were in flight at
    once, each taking a turn of the event loop as a network store does."""

    def __init__(self) -> None:
        self.inner = MemoryKV(max_bytes=10_000_000, clock=ManualClock())
        self.running = self.most = 0

    async def _counted(self, action: Any) -> Any:
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            await asyncio.sleep(0)
            return await action
        finally:
            self.running -= 1

    async def get(self, key: str) -> bytes | None:
        return await self._counted(self.inner.get(key))  # type: ignore[no-any-return]

    async def set(self, key: str, value: bytes, *, ttl: float) -> None:
        await self._counted(self.inner.set(key, value, ttl=ttl))

    async def delete(self, key: str) -> None:
        await self._counted(self.inner.delete(key))


async def test_a_large_request_keeps_few_store_operations_in_flight() -> None:
    """128 reads or writes at once, each under the store's timeout from its start, queued
    behind one another: on a busy event loop the last ones timed out and opened the store's
    circuit for every tenant (the soak, issue 20)."""
    store = Counting()
    stats = CacheStats()
    entries = Entries(store, cache="embeddings", stats=stats)
    view = CacheView(CacheSettings(), entries, stats, resolve=lambda a, _feature: a)
    cache = EmbeddingsCache(Embeddings(), view=view)
    texts = [f"text {i % 256}" for i in range(2048)]
    first = await cache(embed(texts))  # 256 misses: read, then written
    again = await cache(embed(texts))  # 256 hits
    assert first.headers[HITS_HEADER] == "0/2048"
    assert again.headers[HITS_HEADER] == "2048/2048"
    assert 1 < store.most <= 16


async def test_copies_of_an_input_are_fingerprinted_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Copies share their key: 2,048 inputs of 128 distinct were 2,048 fingerprints of the loop
    (the soak, issue 20), now 128; token-id inputs alike; the answer keeps every copy's place."""
    taken: list[Any] = []

    def counted(body: dict[str, Any], **rest: Any) -> str:
        taken.append(body["input"])
        return fingerprint(body, **rest)

    monkeypatch.setattr(embeddings_module, "fingerprint", counted)
    upstream = Embeddings()
    cache = layer(upstream)
    texts = [f"text {i % 8}" for i in range(128)]
    answer = vectors(await cache(embed(texts)))
    assert len(taken) == 8
    assert answer == [[float(len(t)), float(ord(t[0]))] for t in texts]
    assert upstream.inputs == [[f"text {i}" for i in range(8)]]
    taken.clear()
    await cache(embed([[1, 2], [3], [1, 2], [3], [1, 2]]))
    assert taken == [[1, 2], [3]]
