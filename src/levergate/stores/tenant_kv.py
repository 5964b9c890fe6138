"""`TenantKV`: entries that belong to tenants, bounded per tenant and in total, so one tenant can
neither grow the store without end nor push another tenant's entries out.

Where in the stack: under the Responses store (stores/responses.py), which keeps one entry per
stored response; the gateway enforces the bounds itself, on every backend (memory here,
SQLite in tenant_kv_sqlite.py, Redis in tenant_kv_redis.py), so a shared Redis never fills up
with responses and refuses the writes of the rate limits and caches beside them.

The policy, the same on every backend and in one atomic step per write (a Python call, one
SQLite transaction, one Lua script):

1. An entry costs its key and value bytes plus `ENTRY_OVERHEAD` (the bookkeeping beside it),
   so a flood of tiny entries is bounded too. One over the tenant's bound is refused
   (`StoreRefused`): keeping it would evict everything the tenant has.
2. Entries not used for `ttl` seconds are gone: a read marks each entry it finds as used, so a
   conversation that is continued keeps every earlier turn it reads.
3. A tenant over `tenant_bytes` loses its own least recently used entries first.
4. The store over `total_bytes` loses the least recently used entries of whichever tenant holds
   the most bytes at that moment: a tenant that floods the store evicts itself, never a
   smaller one. The entry just written is never the one evicted.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from levergate.core.clock import Clock
from levergate.stores.kv import StoreRefused

# The bookkeeping beside each entry: the dict slots and tuples here, the index rows in SQLite,
# the sorted-set members and hash field in Redis (each about 100-250 bytes).
ENTRY_OVERHEAD = 200
# Expired entries dropped per write at most (the rest at the next writes): a write stays O(1).
PURGE_PER_WRITE = 64


@dataclass(frozen=True, slots=True)
class Bounds:
    tenant_bytes: int
    total_bytes: int
    ttl: float  # seconds an entry outlives its last use

    def cost(self, key: str, value: bytes) -> int:
        return len(key.encode()) + len(value) + ENTRY_OVERHEAD

    def refuse_over(self, cost: int) -> None:
        if cost > min(self.tenant_bytes, self.total_bytes):
            raise StoreRefused(
                f"a {cost}-byte entry is over the per-tenant bound of {self.tenant_bytes} bytes"
            )


class TenantKV(Protocol):
    async def put(self, tenant: str, key: str, value: bytes) -> None:
        """Keep `value`, then evict by the module's policy; `StoreRefused` when it is over the
        tenant's bound by itself."""
        ...

    async def get(self, tenant: str, keys: Sequence[str]) -> list[bytes | None]:
        """Each key's value (None: absent, expired or evicted), each found one marked used."""
        ...

    async def delete(self, tenant: str, key: str) -> bool: ...


class MemoryTenantKV:
    """The policy in memory: an LRU per tenant, one across tenants for expiry, and a heap of
    tenants by bytes (stale heap rows are skipped when met; rebuilt when it outgrows them)."""

    def __init__(self, *, bounds: Bounds, clock: Clock) -> None:
        self._bounds = bounds
        self._clock = clock
        self._tenants: dict[str, OrderedDict[str, tuple[bytes, float]]] = {}
        self._bytes: dict[str, int] = {}
        self._used: OrderedDict[tuple[str, str], float] = OrderedDict()  # oldest use first
        self._heap: list[tuple[int, str]] = []  # (-bytes, tenant), possibly stale
        self.total = 0

    async def bytes_of(self, tenant: str) -> int:
        return self._bytes.get(tenant, 0)

    async def put(self, tenant: str, key: str, value: bytes) -> None:
        cost = self._bounds.cost(key, value)
        self._bounds.refuse_over(cost)
        self._drop(tenant, key)
        now = self._clock.now()
        self._tenants.setdefault(tenant, OrderedDict())[key] = (value, now)
        self._used[tenant, key] = now
        self._account(tenant, cost)
        self._purge(now)
        while self._bytes[tenant] > self._bounds.tenant_bytes:
            self._drop(tenant, next(iter(self._tenants[tenant])))
        while self.total > self._bounds.total_bytes and self._evict_largest(keep=(tenant, key)):
            pass

    async def get(self, tenant: str, keys: Sequence[str]) -> list[bytes | None]:
        now = self._clock.now()
        entries = self._tenants.get(tenant, OrderedDict())
        found: list[bytes | None] = []
        for key in keys:
            entry = entries.get(key)
            if entry is not None and now - entry[1] >= self._bounds.ttl:
                self._drop(tenant, key)
                entry = None
            if entry is None:
                found.append(None)
                continue
            entries[key] = (entry[0], now)
            entries.move_to_end(key)
            self._used[tenant, key] = now
            self._used.move_to_end((tenant, key))
            found.append(entry[0])
        return found

    async def delete(self, tenant: str, key: str) -> bool:
        return self._drop(tenant, key)

    def _drop(self, tenant: str, key: str) -> bool:
        entries = self._tenants.get(tenant)
        entry = entries.pop(key, None) if entries is not None else None
        if entries is None or entry is None:
            return False
        del self._used[tenant, key]
        self._account(tenant, -self._bounds.cost(key, entry[0]))
        if not entries:
            del self._tenants[tenant], self._bytes[tenant]
        return True

    def _account(self, tenant: str, change: int) -> None:
        held = self._bytes.get(tenant, 0) + change
        self._bytes[tenant] = held
        self.total += change
        if held > 0:
            heapq.heappush(self._heap, (-held, tenant))
            if len(self._heap) > 2 * len(self._bytes) + 64:
                self._heap = [(-b, t) for t, b in self._bytes.items()]
                heapq.heapify(self._heap)

    def _purge(self, now: float) -> None:
        for _ in range(PURGE_PER_WRITE):
            oldest = next(iter(self._used.items()), None)
            if oldest is None or now - oldest[1] < self._bounds.ttl:
                return
            self._drop(*oldest[0])

    def _evict_largest(self, *, keep: tuple[str, str]) -> bool:
        """Evict the least recently used entry of the tenant holding the most bytes (not
        `keep`); False when nothing but `keep` is left."""
        passed: list[tuple[int, str]] = []
        try:
            while self._heap:
                held, tenant = heapq.heappop(self._heap)
                if self._bytes.get(tenant) != -held:
                    continue  # stale: the tenant's bytes changed since
                passed.append((held, tenant))
                for key in self._tenants[tenant]:
                    if (tenant, key) != keep:
                        self._drop(tenant, key)
                        return True
            return False
        finally:
            for row in passed:
                if self._bytes.get(row[1]) == -row[0]:
                    heapq.heappush(self._heap, row)
