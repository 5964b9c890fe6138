"""`Entries`: how a cache layer reads and writes entries over its store; `CacheView`: all that
one cache layer is built with.

Reading decodes and checks the entry (format, key binding, checksum, expiry). An entry that does
not decode is logged, counted, deleted and treated as a miss: a corrupt entry must never be
served and must not be met again. The store under it is a `SafeKV`, so a down, slow or locked
store is already a miss here. With `remember` (the exact cache), the entries decoded last are
remembered with the bytes they came from (`layers.cache.memo`): the same bytes again (a
repeated hit) skip the checksum and the parse, not the store's read nor the expiry check.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from levergate.config import CacheSettings
from levergate.core.call import CacheOutcome, CacheResult, Trace
from levergate.layers.cache.memo import Memo
from levergate.layers.cache.stats import CacheStats
from levergate.policies.pricing import from_usage
from levergate.stores.entry import CorruptEntry, Entry, Form, decode, encode
from levergate.stores.kv import KV

log = logging.getLogger("levergate.cache")

CACHE_HEADER = "x-levergate-cache"
AGE_HEADER = "x-levergate-cache-age"
# The decoded entries remembered per cache layer: at most this many, referring to at most this
# many bytes of entries (with the in-memory store, the same bytes the store holds), each at
# most `DECODED_ENTRY_BYTES` (a chat answer is ~1-2 KB).
DECODED_ENTRIES = 1024
DECODED_BYTES = 4 << 20
DECODED_ENTRY_BYTES = 64 << 10
# The `meta` blobs whose `served` result is remembered: at most this long (what `usage_meta`
# writes is ~40 bytes plus the two names).
SERVED_META_BYTES = 512


class Entries:
    def __init__(
        self,
        store: KV,
        *,
        cache: str,
        stats: CacheStats,
        wall: Callable[[], float] = time.time,
        remember: bool = False,
    ) -> None:
        self.store = store
        self._cache = cache
        self._stats = stats
        self.wall = wall
        # With `remember`, key -> (the bytes an entry was decoded from, the entry): `decode` is
        # a function of the two, so equal bytes under the same key decode to the same
        # (immutable) entry.
        self._decoded: Memo[tuple[bytes, Entry]] | None = None
        if remember:
            self._decoded = Memo(max_items=DECODED_ENTRIES, max_bytes=DECODED_BYTES,
                                 max_item_bytes=DECODED_ENTRY_BYTES)  # fmt: skip

    async def load(self, key: str) -> Entry | None:
        data = await self.store.get(key)
        if data is None:
            return None
        memo = self._decoded
        known = memo.get(key) if memo is not None else None
        if known is not None and known[0] == data:  # the same object, from the memory store
            entry = known[1]
        else:
            try:
                entry = decode(data, key=key)
            except CorruptEntry as exc:
                if memo is not None:
                    memo.discard(key)
                self._stats.corrupt.labels(self._cache).inc()
                log.warning("dropping corrupt %s cache entry %s: %s", self._cache, key[:16], exc)
                await self.store.delete(key)
                return None
            if memo is not None:
                memo.put(key, (data, entry), size=len(data) + len(key))
        if self.wall() >= entry.expires:  # `entry.fresh(now)`, without its call
            return None
        return entry

    async def save(
        self, key: str, form: Form, parts: tuple[bytes, ...], *, ttl: float, meta: bytes = b""
    ) -> None:
        now = self.wall()
        entry = Entry(form, parts, created=now, expires=now + ttl, meta=meta)
        await self.store.set(key, encode(entry, key=key), ttl=ttl)


def usage_meta(usage: Any, *, alias: str = "", model: str = "") -> bytes:
    """An answer's token counts and what answered it, as kept in its entry's meta:
    b"prompt,completion,cached,written,written_1h" (the prompt includes the cached parts), then
    a newline and the JSON [alias, upstream model] of the call that produced it: a route's or a
    cascade's alias ("auto") has no price, so a hit is priced at the model that answered."""
    t = from_usage(usage if isinstance(usage, dict) else None)
    counts = b"%d,%d,%d,%d,%d" % (t.input, t.output, t.cached_read, t.cache_write, t.cache_write_1h)
    return counts + b"\n" + json.dumps([alias, model]).encode() if alias or model else counts


def meta_usage(meta: bytes) -> tuple[int, int, int, int, int]:
    """(prompt, completion, cached, written, written_1h); entries written before the prompt
    cache was kept have the first two only."""
    try:
        values = [int(part) for part in meta.partition(b"\n")[0].split(b",")]
    except ValueError:
        return 0, 0, 0, 0, 0
    values = (values + [0] * 5)[:5]
    return values[0], values[1], values[2], values[3], values[4]


def meta_origin(meta: bytes) -> tuple[str, str]:
    """(alias, upstream model) that produced the entry; ("", "") for an entry written before
    they were kept, or whose origin does not parse: such a hit is priced as the alias asked."""
    origin = meta.partition(b"\n")[2]
    try:
        found = json.loads(origin) if origin else None
    except (ValueError, RecursionError):  # not what `usage_meta` writes: origin unknown
        return "", ""
    if isinstance(found, list) and len(found) == 2 and all(isinstance(x, str) for x in found):
        return found[0], found[1]
    return "", ""


def answered_by(trace: Trace) -> tuple[str, str]:
    """(alias, upstream model) that answered the call of `trace`: what Dispatch reached, or
    what answered the entry a cache below served it from."""
    if trace.alias or trace.cache is None:
        return trace.alias, trace.upstream_model
    return trace.cache.alias, trace.cache.upstream_model


def served(cache: str, meta: bytes) -> CacheResult:
    """A hit on an entry with `meta`: the tokens it saved, and the model that answered them.
    The result is immutable and a function of the two: remembered for short metas (the same
    entry hit again parses nothing)."""
    if len(meta) <= SERVED_META_BYTES:
        return _served_memo(cache, meta)
    return _served(cache, meta)


@functools.lru_cache(maxsize=DECODED_ENTRIES)
def _served_memo(cache: str, meta: bytes) -> CacheResult:
    return _served(cache, meta)


def _served(cache: str, meta: bytes) -> CacheResult:
    prompt, completion, cached, written, written_1h = meta_usage(meta)
    alias, model = meta_origin(meta)
    return CacheResult(cache, CacheOutcome.HIT, prompt, completion, cached, written, written_1h,
                       alias=alias, upstream_model=model)  # fmt: skip


def hit_headers(outcome: str, entry: Entry, now: float) -> dict[str, str]:
    age = max(0.0, now - entry.created)  # `entry.age(now)`, without its call
    return {CACHE_HEADER: outcome, AGE_HEADER: f"{age:.3f}", "age": str(int(age))}


@dataclass(frozen=True, slots=True)
class CacheView:
    """What each cache layer (exact, semantic, embeddings) is built with, as one value: the
    cache's rules, the layer's own `Entries` (its name labels the counters), the shared
    counters, and the resolver that turns (alias, feature tag) into the model that answers (part
    of every key). `CacheState.view(name, settings)` makes one per layer."""

    settings: CacheSettings
    entries: Entries
    stats: CacheStats
    resolve: Callable[[str, str], str]
