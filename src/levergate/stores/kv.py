"""The `KV` seam under every cache, and the two wrappers the caches put around a store.

`KV` is three methods over bytes with a time-to-live. Implementations: `MemoryKV` (LRU + TTL,
bounded in bytes), `SqliteKV` (a file; survives restarts), `RedisKV` (shared by replicas).
They raise only `StoreError` (or `TimeoutError`) for a store that is down, locked or broken.

`SafeKV` is what a cache layer actually holds: it bounds every operation by a timeout and turns
any store failure into a miss (or a skipped write) that is logged and counted, never into a
failed request. After a failure it skips the store for a cool-down instead of making every
request wait out the timeout again; the skips are counted too.

`TieredKV` puts a small `MemoryKV` in front of a slower store: hot entries are answered without
a round trip, and everything written goes to both.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

from levergate.core.clock import Clock

log = logging.getLogger("levergate.cache")

FaultHook = Callable[[str, str, str], None]  # (store name, operation, reason)


class StoreError(Exception):
    """A store could not do what was asked: down, locked, refused, or answered garbage."""


class KV(Protocol):
    async def get(self, key: str) -> bytes | None: ...

    async def set(self, key: str, value: bytes, *, ttl: float) -> None:
        """Store `value` for `ttl` seconds (the store may evict it sooner)."""
        ...

    async def delete(self, key: str) -> None: ...


class SafeKV:
    """A `KV` that never raises: failures become misses, logged once per cool-down, counted."""

    def __init__(
        self,
        inner: KV,
        *,
        name: str,
        timeout: float,
        cooldown: float,
        clock: Clock,
        on_fault: FaultHook,
    ) -> None:
        self._inner = inner
        self.name = name
        self._timeout = timeout
        self._cooldown = cooldown
        self._clock = clock
        self._on_fault = on_fault
        self._skip_until = float("-inf")

    async def get(self, key: str) -> bytes | None:
        if self._cooling("get"):
            return None
        try:
            async with asyncio.timeout(self._timeout):
                return await self._inner.get(key)
        except (StoreError, TimeoutError) as exc:
            self._failed("get", exc)
            return None

    async def set(self, key: str, value: bytes, *, ttl: float) -> None:
        if self._cooling("set"):
            return
        try:
            async with asyncio.timeout(self._timeout):
                await self._inner.set(key, value, ttl=ttl)
        except (StoreError, TimeoutError) as exc:
            self._failed("set", exc)

    async def delete(self, key: str) -> None:
        if self._cooling("delete"):
            return
        try:
            async with asyncio.timeout(self._timeout):
                await self._inner.delete(key)
        except (StoreError, TimeoutError) as exc:
            self._failed("delete", exc)

    def _cooling(self, op: str) -> bool:
        if self._clock.now() < self._skip_until:
            self._on_fault(self.name, op, "cooling_down")
            return True
        return False

    def _failed(self, op: str, exc: BaseException) -> None:
        reason = "timeout" if isinstance(exc, TimeoutError) else "error"
        self._on_fault(self.name, op, reason)
        if self._cooldown > 0:
            self._skip_until = self._clock.now() + self._cooldown
        # Logged once per cool-down: a dead store must not flood the log at request rate.
        log.warning(
            "cache store %r failed on %s (%s: %s); treating as a miss for %.1fs",
            self.name, op, type(exc).__name__, exc or reason, self._cooldown,
        )  # fmt: skip


class TieredKV:
    """A small fast store in front of a slower one. The front keeps an entry at most
    `front_ttl` seconds, so a change in the back store (another replica's refresh) is seen
    within that time; entries carry their own expiry, which the cache layers check."""

    def __init__(self, front: KV, back: KV, *, front_ttl: float) -> None:
        self._front = front
        self._back = back
        self._front_ttl = front_ttl

    async def get(self, key: str) -> bytes | None:
        value = await self._front.get(key)
        if value is not None:
            return value
        value = await self._back.get(key)
        if value is not None:
            await self._front.set(key, value, ttl=self._front_ttl)
        return value

    async def set(self, key: str, value: bytes, *, ttl: float) -> None:
        await self._front.set(key, value, ttl=min(ttl, self._front_ttl))
        await self._back.set(key, value, ttl=ttl)

    async def delete(self, key: str) -> None:
        await self._front.delete(key)
        await self._back.delete(key)
