"""The numbers a client sets in cache headers reach a store every tenant shares: garbage is a
400 before the upstream is paid, and a TTL too large is clamped (issue 10, defect 4)."""

from __future__ import annotations

import pytest

from levergate.config import Cache
from levergate.errors import BadRequest
from levergate.layers.cache.entries import CACHE_HEADER
from levergate.stores.kv_memory import MemoryKV
from levergate.testing import FakeUpstream, ManualClock
from tests.unit.layers.cache.helpers import chat, exact_cache
from tests.unit.layers.cache.test_embeddings import Embeddings, embed, layer


class TtlRecorder(MemoryKV):
    """A memory store that remembers the TTL of every write."""

    def __init__(self) -> None:
        super().__init__(max_bytes=1_000_000, clock=ManualClock())
        self.ttls: list[float] = []

    async def set(self, key: str, value: bytes, *, ttl: float) -> None:
        self.ttls.append(ttl)
        await super().set(key, value, ttl=ttl)


@pytest.mark.parametrize(
    "headers",
    [
        {"x-levergate-cache-ttl": "inf"},
        {"x-levergate-cache-ttl": "nan"},
        {"x-levergate-cache-ttl": "-1"},
        {"x-levergate-cache-ttl": "soon"},
        {"cache-control": "max-age=-1"},
        {"cache-control": "max-age=nan"},
        {"cache-control": "max-age=inf"},
        {"cache-control": "no-store, max-age=x"},
    ],
)
async def test_garbage_cache_numbers_are_a_400_before_the_upstream_is_called(
    headers: dict[str, str],
) -> None:
    upstream = FakeUpstream()
    cache, _ = exact_cache(upstream)
    with pytest.raises(BadRequest) as caught:
        await cache(chat(headers=headers))
    assert caught.value.http_status == 400
    assert "seconds" in caught.value.message
    assert upstream.calls == []
    embeddings = Embeddings()
    with pytest.raises(BadRequest):
        await layer(embeddings)(embed("a").with_ctx(headers=headers))
    assert embeddings.inputs == []


async def test_a_huge_ttl_is_clamped_to_the_configured_maximum() -> None:
    store = TtlRecorder()
    cache, _ = exact_cache(FakeUpstream(), store=store, settings=Cache(max_ttl_seconds=3600))
    for i, text in enumerate(("1e306", "1e20", "86400")):
        reply = await cache(chat(headers={"x-levergate-cache-ttl": text}, max_tokens=i + 1))
        assert reply.headers[CACHE_HEADER] == "miss"
    assert store.ttls == [3600, 3600, 3600]
    await cache(chat(headers={"x-levergate-cache-ttl": "5"}, max_tokens=9))
    assert store.ttls[-1] == 5
    hit = await cache(chat(headers={"cache-control": "max-age=1e300"}, max_tokens=1))
    assert hit.headers[CACHE_HEADER] == "hit"
