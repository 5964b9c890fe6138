"""EmbeddingsCache: each input cached alone; only the missing inputs go upstream, in order."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from levergate.config import Cache, CacheRule
from levergate.core.call import Call, Context
from levergate.core.reply import Completed, Reply
from levergate.errors import PayloadTooLarge
from levergate.layers.cache.embeddings import HITS_HEADER, EmbeddingsCache
from levergate.layers.cache.entries import CACHE_HEADER, Entries
from levergate.layers.cache.stats import CacheStats
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
            {"object": "embedding", "index": i, "embedding": [float(len(t)), float(ord(t[0]))]}
            for i, t in enumerate(items)
        ]
        usage = {"prompt_tokens": len(items), "total_tokens": len(items)}
        # Out of order on purpose: the cache must use `index`.
        return Completed(orjson.dumps({"object": "list", "data": data[::-1], "model": "e",
                                       "usage": usage}))  # fmt: skip


def embed(value: Any, **body: Any) -> Call:
    return Call(kind="embedding", body={"model": "e", "input": value, **body}, ctx=Context("r"))


def layer(upstream: Embeddings, settings: Cache | None = None) -> EmbeddingsCache:
    stats = CacheStats()
    entries = Entries(MemoryKV(max_bytes=1_000_000, clock=ManualClock()), cache="embeddings",
                      stats=stats)  # fmt: skip
    return EmbeddingsCache(upstream, settings=settings or Cache(), entries=entries, stats=stats,
                           resolve=lambda a, _feature: a)  # fmt: skip


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
    off = layer(upstream, Cache(models={"e": CacheRule(mode="off")}))
    assert (await off(embed("apple"))).headers[CACHE_HEADER] == "bypass"
    await cache(Call(kind="embedding", body={"model": "e", "input": "pear"},
                     ctx=Context("r", headers={"cache-control": "no-store"})))  # fmt: skip
    await cache(embed("pear"))
    assert upstream.inputs[-2:] == [["pear"], ["pear"]]


async def test_copies_of_one_input_cannot_amplify_the_response() -> None:
    """Each copy of a cached input costs the upstream nothing but a full vector here: 20,000
    copies of "a" made a 651 MB response. Beyond the configured bytes the cache refuses with a
    413 before building the response, and before the upstream when the copies are cached."""
    upstream = Embeddings()
    cache = layer(upstream, Cache(embeddings_max_response_bytes=4096))
    with pytest.raises(PayloadTooLarge) as caught:
        await cache(embed(["a"] * 100))  # one input upstream, 100 vectors back
    assert caught.value.http_status == 413
    assert caught.value.param == "input"
    assert upstream.inputs == [["a"]]
    with pytest.raises(PayloadTooLarge):
        await cache(embed(["a"] * 99 + ["b"]))  # "a" is cached now: refused before upstream
    assert upstream.inputs == [["a"]]
    assert len(vectors(await cache(embed(["a"] * 10 + ["c"])))) == 11
