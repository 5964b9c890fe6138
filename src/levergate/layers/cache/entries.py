"""`Entries`: how a cache layer reads and writes entries over its store.

Reading decodes and checks the entry (format, key binding, checksum, expiry). An entry that does
not decode is logged, counted, deleted and treated as a miss: a corrupt entry must never be
served and must not be met again. The store under it is a `SafeKV`, so a down, slow or locked
store is already a miss here.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from levergate.layers.cache.stats import CacheStats
from levergate.policies.pricing import from_usage
from levergate.stores.entry import CorruptEntry, Entry, Form, decode, encode
from levergate.stores.kv import KV

log = logging.getLogger("levergate.cache")

CACHE_HEADER = "x-levergate-cache"
AGE_HEADER = "x-levergate-cache-age"


class Entries:
    def __init__(
        self,
        store: KV,
        *,
        cache: str,
        stats: CacheStats,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self._cache = cache
        self._stats = stats
        self.wall = wall

    async def load(self, key: str) -> Entry | None:
        data = await self.store.get(key)
        if data is None:
            return None
        try:
            entry = decode(data, key=key)
        except CorruptEntry as exc:
            self._stats.corrupt.labels(self._cache).inc()
            log.warning("dropping corrupt %s cache entry %s: %s", self._cache, key[:16], exc)
            await self.store.delete(key)
            return None
        if not entry.fresh(self.wall()):
            return None
        return entry

    async def save(
        self, key: str, form: Form, parts: tuple[bytes, ...], *, ttl: float, meta: bytes = b""
    ) -> None:
        now = self.wall()
        entry = Entry(form, parts, created=now, expires=now + ttl, meta=meta)
        await self.store.set(key, encode(entry, key=key), ttl=ttl)


def usage_meta(usage: Any) -> bytes:
    """An answer's token counts, as kept in its entry's meta:
    b"prompt,completion,cached,written,written_1h" (the prompt includes the cached parts)."""
    t = from_usage(usage if isinstance(usage, dict) else None)
    return b"%d,%d,%d,%d,%d" % (t.input, t.output, t.cached_read, t.cache_write, t.cache_write_1h)


def meta_usage(meta: bytes) -> tuple[int, int, int, int, int]:
    """(prompt, completion, cached, written, written_1h); entries written before the prompt
    cache was kept have the first two only."""
    try:
        values = [int(part) for part in meta.split(b",")]
    except ValueError:
        return 0, 0, 0, 0, 0
    values = (values + [0] * 5)[:5]
    return values[0], values[1], values[2], values[3], values[4]


def hit_headers(outcome: str, entry: Entry, now: float) -> dict[str, str]:
    age = entry.age(now)
    return {CACHE_HEADER: outcome, AGE_HEADER: f"{age:.3f}", "age": str(int(age))}
