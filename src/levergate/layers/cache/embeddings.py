"""EmbeddingsCache: a text is never embedded twice.

Embeddings are deterministic, so every `/v1/embeddings` input is cached on its own, keyed by the
fingerprint of (resolved model, dimensions, encoding format and any other shaping field, the
input item, the tenant's namespace). A request whose inputs are partly cached sends only the
missing ones upstream — once each, even if repeated in the request — and the response is put
back together in the request's order. `usage` reports what the upstream actually processed (zero
on a full hit), because that is what was paid for.

Sits in FRONT next to the exact cache (it is the exact cache for embeddings); cached vectors are
spliced into the response as pre-serialised JSON, never re-encoded.

What the answer may cost is bounded by what the client sent: at most `embeddings_max_copies`
inputs per distinct input (copies are free upstream and a full vector each here: 2,048 x "a"
made 66.7 MB), and `embeddings_max_response_bytes` in all. Work that grows with the number of
inputs (fingerprints, splitting the upstream's vectors, assembling the answer) gives the event
loop back every `_SLICE` inputs, so a large answer never holds it for long; the edge then sends
it in chunks, as fast as the client reads (server/handlers/openai.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import orjson

from levergate.config import CacheSettings
from levergate.core.call import CacheOutcome, CacheResult, Call
from levergate.core.reply import Completed, Reply
from levergate.core.service import Answer, Layer, Service
from levergate.errors import BadRequest, PayloadTooLarge, UpstreamUnavailable
from levergate.layers.cache.entries import CACHE_HEADER, CacheView
from levergate.policies.cache_policy import OFF, bypass_header, clamped, namespace, rule_for
from levergate.policies.fingerprint import fingerprint
from levergate.protocol.openai.body import embedding_inputs
from levergate.stores.entry import Form

if TYPE_CHECKING:
    from levergate.layers.shared import Shared

NAME = "embeddings"
# A bypass for an input the cache cannot key one by one (it goes upstream as it is).
UNKEYED = "input"
HITS_HEADER = "x-levergate-cache-hits"
# The JSON around one vector in the response: {"object":"embedding","index":2047,"embedding":}
_ROW_BYTES = 50
# Inputs handled between two yields to the event loop (a few ms of work at most).
_SLICE = 128
# Store reads and writes one request has in flight at once. Each runs under the store's timeout
# (`cache.store.timeout_seconds`, 0.1 s), counted from when it starts: 128 at once queued behind
# one another in the client (and opened up to 128 Redis connections), so on a busy event loop
# the last ones timed out, the store's circuit opened for every tenant, and the next requests
# all missed (the soak, issue 20: a tenant's 2,048-input requests made another tenant's p99 15x
# its solo p99, 7.8x with a 1 s store timeout).
_STORE_SLICE = 16
T = TypeVar("T")


class EmbeddingsCache:
    @classmethod
    def layer(cls, settings: CacheSettings, *, shared: Shared) -> Layer | None:
        """None when the cache is off (`Shared.cache` is None)."""
        if (state := shared.cache) is None:
            return None
        return partial(cls, view=state.view("embeddings", settings))

    def __init__(
        self,
        inner: Service,
        *,
        view: CacheView,
    ) -> None:
        self._inner = inner
        self._view = view

    def __call__(self, call: Call) -> Answer:
        if call.kind != "embedding":
            return self._inner(call)
        return self._cached(call)

    async def _cached(self, call: Call) -> Reply:
        rule = rule_for(self._view.settings, model=call.model, feature=call.ctx.controls.feature)
        items = embedding_inputs(call.body.get("input"))
        if rule.mode == "off" or not items:
            self._view.stats.lookup(NAME, "bypass")
            reply = await self._inner(call)
            reply.headers.setdefault(CACHE_HEADER, bypass_header(OFF if items else UNKEYED))
            return reply
        _bounded_copies(items, most=self._view.settings.embeddings_max_copies)
        asked = clamped(call.ctx.controls.cache, max_ttl=self._view.settings.max_ttl_seconds)
        keys = await self._keys(call, items)
        found = await self._load(keys) if asked.lookup else {}
        missing = [k for k in dict.fromkeys(keys) if k not in found]
        hits = len(keys) - sum(1 for k in keys if k not in found)
        self._view.stats.lookup(NAME, "hit" if not missing else "miss")
        _bounded(keys, found, limit=self._view.settings.embeddings_max_response_bytes)
        outcome = CacheOutcome.MISS if missing else CacheOutcome.HIT
        call.ctx.trace.cache = CacheResult(NAME, outcome)
        if not missing:
            reply = await _response(call.model, keys, found, usage=None)
        else:
            reply = await self._fetch(call, items, keys, missing, found, store=asked.store)
        reply.headers[CACHE_HEADER] = "hit" if not missing else "miss"
        reply.headers[HITS_HEADER] = f"{hits}/{len(keys)}"
        return reply

    async def _load(self, keys: list[str]) -> dict[str, bytes]:
        found: dict[str, bytes] = {}
        async for part in _in_slices(list(dict.fromkeys(keys)), _STORE_SLICE):
            loaded = await asyncio.gather(*(self._view.entries.load(k) for k in part))
            found.update((k, e.parts[0]) for k, e in zip(part, loaded, strict=True) if e)
        return found

    async def _keys(self, call: Call, items: list[Any]) -> list[str]:
        """Each input's key, fingerprinted once per distinct input: copies (up to
        `embeddings_max_copies` each) share it. 2,048 inputs of 128 distinct were 2,048
        fingerprints, a second of the loop in every 24 of the soak's attack (issue 20)."""
        known: dict[str | tuple[int, ...], str] = {}
        keys: list[str] = []
        async for part in _in_slices(items):
            for item in part:
                same = item if isinstance(item, str) else tuple(item)
                key = known.get(same)
                if key is None:
                    key = known[same] = self._key(call, item)
                keys.append(key)
        return keys

    def _key(self, call: Call, item: Any) -> str:
        return fingerprint(
            {**call.body, "input": item},
            kind="embedding",
            resolved_model=self._view.resolve(call.model, call.ctx.controls.feature),
            namespace=namespace(self._view.settings, call.ctx.principal.tenant),
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
        vectors = await _vectors(reply.data, len(send))
        ttl = self._view.settings.embeddings_ttl_seconds
        found.update(zip(missing, vectors, strict=True))
        if store:
            async for part in _in_slices(list(zip(missing, vectors, strict=True)), _STORE_SLICE):
                await asyncio.gather(
                    *(self._view.entries.save(k, Form.BLOB, (v,), ttl=ttl) for k, v in part)
                )
        if whole:
            return reply  # the upstream's own bytes, already in the request's order
        _bounded(keys, found, limit=self._view.settings.embeddings_max_response_bytes)
        model = reply.data.get("model")
        return await _response(model if isinstance(model, str) else call.model, keys, found,
                               usage=reply.data.get("usage"))  # fmt: skip


def _bounded_copies(items: list[Any], *, most: int) -> None:
    """Refuse a request whose inputs repeat more than `most` times per distinct input."""
    if len(items) <= most:
        return
    distinct = len({item if isinstance(item, str) else tuple(item) for item in items})
    if len(items) > most * distinct:
        raise BadRequest(
            f"The request repeats its inputs: {len(items)} inputs, {distinct} distinct; at "
            f"most {most} inputs per distinct input are answered. Send each input once and "
            "reuse its embedding.",
            param="input",
            code="too_many_copies",
        )


async def _in_slices(items: Sequence[T], size: int = _SLICE) -> AsyncIterator[Sequence[T]]:
    """`items` `size` at a time, the event loop given back between two slices."""
    for at in range(0, len(items), size):
        if at:
            await asyncio.sleep(0)
        yield items[at : at + size]


async def _vectors(data: dict[str, Any], count: int) -> list[bytes]:
    rows = data.get("data")
    if not isinstance(rows, list) or len(rows) != count:
        raise UpstreamUnavailable("the upstream returned the wrong number of embeddings")
    ordered: list[bytes | None] = [None] * count
    for position, row in enumerate(rows):
        if position and not position % _SLICE:
            await asyncio.sleep(0)
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


async def _response(
    model: str, keys: list[str], found: dict[str, bytes], *, usage: Any
) -> Completed:
    """The answer in the request's order, put together from the vectors' own bytes (written
    once, never re-encoded), a slice at a time; its usage given, so nothing parses it again."""
    if not isinstance(usage, dict):
        usage = {"prompt_tokens": 0, "total_tokens": 0}
    parts = [b'{"object":"list","data":[']
    async for rows in _in_slices(range(len(keys))):
        for i in rows:  # the vector's own bytes, shared by every copy: never copied here
            head = b'%s{"object":"embedding","index":%d,"embedding":' % (b"," if i else b"", i)
            parts += (head, found[keys[i]], b"}")
    tail = orjson.dumps({"model": model, "usage": usage})
    parts.append(b"]," + tail[1:])
    return Completed(parts=parts, usage=usage)
