"""EmbeddingsCache: a text is never embedded twice.

Embeddings are deterministic, so every `/v1/embeddings` input is cached on its own, keyed by the
fingerprint of (resolved model, dimensions, encoding format and any other shaping field, the
input item, the tenant's namespace). A request whose inputs are partly cached sends only the
missing ones upstream — once each, even if repeated in the request — and the response is put
back together in the request's order. `usage` reports what the upstream actually processed (zero
on a full hit), because that is what was paid for.

Sits in FRONT next to the exact cache (it is the exact cache for embeddings); cached vectors are
spliced into the response as pre-serialised JSON, never re-encoded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import orjson

from levergate.config import Cache
from levergate.core.call import CacheOutcome, CacheResult, Call
from levergate.core.reply import Completed, Reply
from levergate.core.service import Layer, Service
from levergate.errors import PayloadTooLarge, UpstreamUnavailable
from levergate.layers.cache.entries import CACHE_HEADER, Entries
from levergate.layers.cache.stats import CacheStats
from levergate.policies.cache_policy import controls, namespace, rule_for
from levergate.policies.fingerprint import fingerprint
from levergate.protocol.openai import embedding_inputs
from levergate.stores.entry import Form

if TYPE_CHECKING:
    from levergate.layers.shared import Shared

NAME = "embeddings"
HITS_HEADER = "x-levergate-cache-hits"
# The JSON around one vector in the response: {"object":"embedding","index":2047,"embedding":}
_ROW_BYTES = 50


class EmbeddingsCache:
    @classmethod
    def layer(cls, settings: Cache, *, shared: Shared) -> Layer | None:
        """None when the cache is off (`Shared.cache` is None)."""
        if (state := shared.cache) is None:
            return None
        return partial(
            cls, settings=settings, entries=state.entries("embeddings"), stats=state.stats,
            resolve=state.resolve,
        )  # fmt: skip

    def __init__(
        self,
        inner: Service,
        *,
        settings: Cache,
        entries: Entries,
        stats: CacheStats,
        resolve: Callable[[str, str], str],
    ) -> None:
        self._inner = inner
        self._settings = settings
        self._entries = entries
        self._stats = stats
        self._resolve = resolve

    async def __call__(self, call: Call) -> Reply:
        if call.kind != "embedding":
            return await self._inner(call)
        rule = rule_for(self._settings, model=call.model, feature=call.ctx.feature)
        items = embedding_inputs(call.body.get("input"))
        if rule.mode == "off" or not items:
            self._stats.lookup(NAME, "bypass")
            reply = await self._inner(call)
            reply.headers.setdefault(CACHE_HEADER, "bypass")
            return reply
        asked = controls(call.ctx.headers, max_ttl=self._settings.max_ttl_seconds)
        keys = [self._key(call, item) for item in items]
        found: dict[str, bytes] = {}
        if asked.lookup:
            unique = list(dict.fromkeys(keys))
            loaded = await asyncio.gather(*(self._entries.load(k) for k in unique))
            found = {k: e.parts[0] for k, e in zip(unique, loaded, strict=True) if e is not None}
        missing = [k for k in dict.fromkeys(keys) if k not in found]
        hits = len(keys) - sum(1 for k in keys if k not in found)
        self._stats.lookup(NAME, "hit" if not missing else "miss")
        _bounded(keys, found, limit=self._settings.embeddings_max_response_bytes)
        outcome = CacheOutcome.MISS if missing else CacheOutcome.HIT
        call.ctx.trace.cache = CacheResult(NAME, outcome)
        if not missing:
            reply = Completed(_response(call.model, keys, found, usage=None))
        else:
            reply = await self._fetch(call, items, keys, missing, found, store=asked.store)
        reply.headers[CACHE_HEADER] = "hit" if not missing else "miss"
        reply.headers[HITS_HEADER] = f"{hits}/{len(keys)}"
        return reply

    def _key(self, call: Call, item: Any) -> str:
        return fingerprint(
            {**call.body, "input": item},
            kind="embedding",
            resolved_model=self._resolve(call.model, call.ctx.feature),
            namespace=namespace(self._settings, call.ctx.tenant),
        )

    async def _fetch(
        self,
        call: Call,
        items: list[Any],
        keys: list[str],
        missing: list[str],
        found: dict[str, bytes],
        *,
        store: bool,
    ) -> Reply:
        first_item = dict(zip(keys, items, strict=True))
        send = [first_item[k] for k in missing]
        whole = len(send) == len(items)
        reply = await self._inner(call if whole else call.with_body(input=send))
        if not isinstance(reply, Completed) or reply.status != 200:
            return reply
        vectors = _vectors(reply.data, len(send))
        ttl = self._settings.embeddings_ttl_seconds
        found.update(zip(missing, vectors, strict=True))
        if store:
            saves = zip(missing, vectors, strict=True)
            await asyncio.gather(
                *(self._entries.save(k, Form.BLOB, (v,), ttl=ttl) for k, v in saves)
            )
        if whole:
            return reply  # the upstream's own bytes, already in the request's order
        _bounded(keys, found, limit=self._settings.embeddings_max_response_bytes)
        model = reply.data.get("model")
        return Completed(
            _response(model if isinstance(model, str) else call.model, keys, found,
                      usage=reply.data.get("usage"))
        )  # fmt: skip


def _vectors(data: dict[str, Any], count: int) -> list[bytes]:
    rows = data.get("data")
    if not isinstance(rows, list) or len(rows) != count:
        raise UpstreamUnavailable("the upstream returned the wrong number of embeddings")
    ordered: list[bytes | None] = [None] * count
    for position, row in enumerate(rows):
        index = row.get("index", position) if isinstance(row, dict) else None
        if not isinstance(index, int) or not 0 <= index < count or "embedding" not in row:
            raise UpstreamUnavailable("the upstream returned a malformed embeddings list")
        ordered[index] = orjson.dumps(row["embedding"])
    if any(v is None for v in ordered):
        raise UpstreamUnavailable("the upstream returned duplicate embedding indexes")
    return [v for v in ordered if v is not None]


def _bounded(keys: list[str], found: dict[str, bytes], *, limit: int) -> None:
    """Refuse a response over `limit` bytes before building it. Copies of one input cost the
    upstream nothing but a full vector each here, so the response can be far larger than
    anything the upstream sent; a key not yet found is projected at the largest known vector,
    so a request of cached copies is refused before anything is sent upstream."""
    known = [len(found[key]) for key in keys if key in found]
    if not known:
        return
    projected = sum(known) + (len(keys) - len(known)) * max(known) + _ROW_BYTES * len(keys)
    if projected > limit:
        raise PayloadTooLarge(
            f"The embeddings response would be about {projected} bytes, more than the limit "
            f"of {limit}; send fewer inputs per request.",
            param="input",
            code="response_too_large",
        )


def _response(model: str, keys: list[str], found: dict[str, bytes], *, usage: Any) -> bytes:
    data = [
        {"object": "embedding", "index": i, "embedding": orjson.Fragment(found[key])}
        for i, key in enumerate(keys)
    ]
    if not isinstance(usage, dict):
        usage = {"prompt_tokens": 0, "total_tokens": 0}
    return orjson.dumps({"object": "list", "data": data, "model": model, "usage": usage})
