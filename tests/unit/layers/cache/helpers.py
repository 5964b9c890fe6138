"""Test vocabulary for the cache tests: chat calls, ready-made cache layers and stream readers.
The fake upstream they answer from is `levergate.testing.FakeUpstream`."""

from __future__ import annotations

from typing import Any

import orjson

from levergate.config import CacheSettings
from levergate.core.call import Call, Context
from levergate.core.controls import DEFAULT_CACHE, CachePolicy, Controls, Principal
from levergate.core.reply import Reply, Stream
from levergate.core.service import Service
from levergate.layers.cache.entries import CacheView, Entries
from levergate.layers.cache.exact import ExactCache
from levergate.layers.cache.stats import CacheStats
from levergate.stores.kv import KV
from levergate.stores.kv_memory import MemoryKV
from levergate.testing import FakeUpstream, ManualClock

USER = [{"role": "user", "content": "What is the capital of France?"}]


def chat(
    *,
    stream: bool = False,
    cache: CachePolicy = DEFAULT_CACHE,
    tenant: str = "default",
    feature: str = "",
    raw: bool = False,
    **body: Any,
) -> Call:
    """`raw`: with the JSON bytes of the body, as the edge makes a call (`Call.raw`)."""
    merged = {"model": "m", "messages": USER, "temperature": 0, "stream": stream, **body}
    controls = Controls(feature=feature, cache=cache)
    ctx = Context("r", principal=Principal(tenant=tenant), controls=controls)
    return Call(kind="chat", body=merged, ctx=ctx, raw=orjson.dumps(merged) if raw else None)


class Routed(FakeUpstream):
    """Answers as Dispatch leaves the trace: a route sent the request to the alias "mini",
    sent upstream under the model name "mini-2024"."""

    async def __call__(self, call: Call) -> Reply:
        call.ctx.trace.alias, call.ctx.trace.upstream_model = "mini", "mini-2024"
        return await super().__call__(call)


def exact_cache(
    inner: Service,
    *,
    store: KV | None = None,
    settings: CacheSettings | None = None,
    stats: CacheStats | None = None,
    clock: ManualClock | None = None,
) -> tuple[ExactCache, CacheStats]:
    stats = stats or CacheStats()
    kv = store if store is not None else MemoryKV(max_bytes=10_000_000, clock=ManualClock())
    entries = Entries(kv, cache="exact", stats=stats)
    view = CacheView(settings or CacheSettings(), entries, stats, resolve=lambda alias, _f: alias)
    layer = ExactCache(inner, view=view, clock=clock)
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
