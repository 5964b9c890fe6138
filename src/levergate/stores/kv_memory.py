"""`MemoryKV`: an LRU with per-entry expiry, bounded by the bytes it holds.

Used alone (`cache.store.backend: memory`), as the front tier over SQLite or Redis, and by the
tests. Every operation is synchronous under the hood, so it is atomic with respect to other
coroutines; it never raises.

Accounting counts key and value bytes plus a fixed per-entry overhead (the dict slot, the tuple
and two object headers, measured at about 200 bytes on CPython 3.11), so `max_bytes` tracks the
process's real memory closely enough to size it.
"""

from __future__ import annotations

from collections import OrderedDict

from levergate.core.clock import Clock

ENTRY_OVERHEAD = 200


class MemoryKV:
    def __init__(self, *, max_bytes: int, clock: Clock) -> None:
        self._max_bytes = max_bytes
        self._clock = clock
        self._entries: OrderedDict[str, tuple[bytes, float]] = OrderedDict()
        self._bytes = 0

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    async def get(self, key: str) -> bytes | None:
        found = self._entries.get(key)
        if found is None:
            return None
        value, expires = found
        if self._clock.now() >= expires:
            self._drop(key)
            return None
        self._entries.move_to_end(key)
        return value

    async def set(self, key: str, value: bytes, *, ttl: float) -> None:
        if ttl <= 0:
            self._drop(key)
            return
        cost = _cost(key, value)
        if cost > self._max_bytes:
            # Larger than the whole store: keeping it would evict everything else.
            self._drop(key)
            return
        self._drop(key)
        self._entries[key] = (value, self._clock.now() + ttl)
        self._bytes += cost
        self._evict()

    async def delete(self, key: str) -> None:
        self._drop(key)

    def _drop(self, key: str) -> None:
        found = self._entries.pop(key, None)
        if found is not None:
            self._bytes -= _cost(key, found[0])

    def _evict(self) -> None:
        """Least recently used first. Expired entries are dropped when met by `get`; until then
        they count against the bound and age out of the LRU order like any other."""
        while self._bytes > self._max_bytes and self._entries:
            key, (value, _) = self._entries.popitem(last=False)
            self._bytes -= _cost(key, value)


def _cost(key: str, value: bytes) -> int:
    return len(key) + len(value) + ENTRY_OVERHEAD
