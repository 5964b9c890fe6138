"""Test vocabulary for the cache tests: chat calls, ready-made cache layers and stream readers.
The fake upstream they answer from is `levergate.testing.FakeUpstream`."""

from __future__ import annotations

from typing import Any

from levergate.config import Cache
from levergate.core.call import Call, Context
from levergate.core.reply import Reply, Stream
from levergate.core.service import Service
from levergate.layers.cache.entries import Entries
from levergate.layers.cache.exact import ExactCache
from levergate.layers.cache.stats import CacheStats
from levergate.stores.kv import KV
from levergate.stores.kv_memory import MemoryKV
from levergate.testing import ManualClock

USER = [{"role": "user", "content": "What is the capital of France?"}]


def chat(
    *,
    stream: bool = False,
    headers: dict[str, str] | None = None,
    tenant: str = "default",
    feature: str = "",
    **body: Any,
) -> Call:
    merged = {"model": "m", "messages": USER, "temperature": 0, "stream": stream, **body}
    ctx = Context("r", tenant=tenant, feature=feature, headers=headers or {})
    return Call(kind="chat", body=merged, ctx=ctx)


def exact_cache(
    inner: Service,
    *,
    store: KV | None = None,
    settings: Cache | None = None,
    stats: CacheStats | None = None,
    clock: ManualClock | None = None,
) -> tuple[ExactCache, CacheStats]:
    stats = stats or CacheStats()
    kv = store if store is not None else MemoryKV(max_bytes=10_000_000, clock=ManualClock())
    layer = ExactCache(
        inner,
        settings=settings or Cache(),
        entries=Entries(kv, cache="exact", stats=stats),
        stats=stats,
        resolve=lambda alias, _feature: alias,
        clock=clock,
    )
    return layer, stats


async def drain(reply: Reply) -> list[dict[str, Any]]:
    assert isinstance(reply, Stream)
    try:
        return [event.json() async for event in reply]
    finally:
        await reply.aclose()


def text_of(chunks: list[dict[str, Any]]) -> str:
    return "".join(
        c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices")
    )
