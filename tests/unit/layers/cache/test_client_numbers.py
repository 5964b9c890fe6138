"""The numbers a client sets in cache headers reach a store every tenant shares: garbage is a
400 at the edge, before any layer runs (tests/unit/test_control_headers.py), and a TTL too
large is clamped by the caches themselves, whoever built the call (issue 10, defect 4)."""

from __future__ import annotations

import math

import pytest

from levergate.config import CacheSettings
from levergate.core.controls import CachePolicy
from levergate.layers.cache.entries import CACHE_HEADER
from levergate.stores.kv_memory import MemoryKV
from levergate.testing import FakeUpstream, ManualClock
from tests.unit.layers.cache.helpers import chat, exact_cache


class TtlRecorder(MemoryKV):
    """A memory store that remembers the TTL of every write."""

    def __init__(self) -> None:
        super().__init__(max_bytes=1_000_000, clock=ManualClock())
        self.ttls: list[float] = []

    async def set(self, key: str, value: bytes, *, ttl: float) -> None:
        self.ttls.append(ttl)
        await super().set(key, value, ttl=ttl)


@pytest.mark.parametrize("value", [math.inf, math.nan, -1.0])
def test_a_cache_policy_holds_only_finite_non_negative_seconds(value: float) -> None:
    with pytest.raises(ValueError, match="finite"):
        CachePolicy(ttl=value)
    with pytest.raises(ValueError, match="finite"):
        CachePolicy(max_age=value)


async def test_a_huge_ttl_is_clamped_to_the_configured_maximum() -> None:
    store = TtlRecorder()
    cache, _ = exact_cache(
        FakeUpstream(), store=store, settings=CacheSettings(max_ttl_seconds=3600)
    )
    for i, ttl in enumerate((1e306, 1e20, 86400)):
        reply = await cache(chat(cache=CachePolicy(ttl=ttl), max_tokens=i + 1))
        assert reply.headers[CACHE_HEADER] == "miss"
    assert store.ttls == [3600, 3600, 3600]
    await cache(chat(cache=CachePolicy(ttl=5), max_tokens=9))
    assert store.ttls[-1] == 5
    hit = await cache(chat(cache=CachePolicy(max_age=1e300), max_tokens=1))
    assert hit.headers[CACHE_HEADER] == "hit"
