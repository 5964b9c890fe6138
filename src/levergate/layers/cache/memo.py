"""`Memo`: what a cache layer worked out from some bytes, kept for the next time it meets the
same bytes (issue 22: an exact-cache hit's own work, counted by callgrind, was mostly the
same request's key and the same entry's decoding done again on every hit).

Two uses, both of pure functions, so a remembered value is the value the work would give:

- the exact cache's key of a request body (`ExactCache`): the canonical fingerprint, the rule
  and the bypass verdict are functions of the body (hence of the raw JSON bytes it was parsed
  from, `Call.raw`), the request kind, the feature tag and the tenant; the memo's key holds
  all four, and a body's decision is kept once it was served a hit;
- an entry decoded from the store's bytes (`Entries.load`): `stores.entry.decode` is a
  function of the bytes and the key; a remembered entry is used only when the store returned
  equal bytes (the same object, for the in-memory store), and is still checked for freshness
  on every load.

Bounded by count and by the bytes its keys and values refer to, whichever is reached first;
the oldest goes first (insertion order: a hit costs one dict look-up, no reordering). Bytes
larger than `max_item_bytes` are not kept: hashing or comparing them again costs about what the
work saved, and they would crowd out the small answers that repeat.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

V = TypeVar("V")

__all__ = ["Memo"]


class Memo(Generic[V]):
    __slots__ = ("_bytes", "_max_bytes", "_max_item_bytes", "_max_items", "_sizes", "_values",
                 "get")  # fmt: skip

    def __init__(self, *, max_items: int, max_bytes: int, max_item_bytes: int) -> None:
        self._max_items = max_items
        self._max_bytes = max_bytes
        self._max_item_bytes = max_item_bytes
        self._values: dict[Hashable, V] = {}
        # In the order the values were put: an OrderedDict drops its oldest in constant time
        # (`next(iter(d))` on a plain dict walks the slots its earlier deletions left empty).
        self._sizes: OrderedDict[Hashable, int] = OrderedDict()
        self._bytes = 0
        # The value kept under a key, or None: the dict's own `get` (one C call a look-up).
        self.get = self._values.get

    def __len__(self) -> int:
        return len(self._sizes)

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def put(self, key: Hashable, value: V, *, size: int) -> None:
        """Keep `value` under `key`; `size`: the bytes the two refer to (not kept when it is
        over `max_item_bytes`)."""
        if size > self._max_item_bytes:
            return
        sizes, values = self._sizes, self._values
        old = sizes.pop(key, None)
        if old is not None:
            self._bytes -= old
            del values[key]
        if len(sizes) >= self._max_items or self._bytes + size > self._max_bytes:
            self._evict(size)
        values[key] = value
        sizes[key] = size
        self._bytes += size

    def _evict(self, room: int) -> None:
        """The oldest out until one more item of `room` bytes fits."""
        sizes, values = self._sizes, self._values
        while sizes and (len(sizes) >= self._max_items or self._bytes + room > self._max_bytes):
            oldest, size = sizes.popitem(last=False)
            self._bytes -= size
            del values[oldest]

    def discard(self, key: Hashable) -> None:
        size = self._sizes.pop(key, None)
        if size is not None:
            self._bytes -= size
            del self._values[key]
