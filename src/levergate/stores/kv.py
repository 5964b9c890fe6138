"""The `KV` seam under every cache, and the two wrappers the caches put around a store.

`KV` is three methods over bytes with a time-to-live. Implementations: `MemoryKV` (LRU + TTL,
bounded in bytes), `SqliteKV` (a file; survives restarts), `RedisKV` (shared by replicas).
They raise only `StoreError` (or `TimeoutError`) for a store that is down, locked or broken.

`SafeKV` is what a cache layer actually holds: it bounds every operation by a timeout and turns
any store failure into a miss (or a skipped write) that is logged and counted, never into a
failed request. After a failure it skips the store for a cool-down instead of making every
request wait out the timeout again, then lets one request try it (`stores.circuit`); the skips
are counted too. A store that refused one request's own data is not cooled down.

`TieredKV` puts a small `MemoryKV` in front of a slower store: hot entries are answered without
a round trip, and everything written goes to both.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

from levergate.core.clock import Clock
from levergate.stores.circuit import Circuit

log = logging.getLogger("levergate.cache")

FaultHook = Callable[[str, str, str], None]  # (store name, operation, reason)
_T = TypeVar("_T")


class StoreError(Exception):
    """A store could not do what was asked: down, locked, refused, or answered garbage."""


class StoreRefused(StoreError):
    """The store is up and refused this one operation for its own data (an expiry or a value
    it does not accept, a key of another type): the caller's fault, not the store's."""


class KV(Protocol):
    async def get(self, key: str) -> bytes | None: ...

    async def set(self, key: str, value: bytes, *, ttl: float) -> None:
        """Store `value` for `ttl` seconds (the store may evict it sooner)."""
        ...

    async def delete(self, key: str) -> None: ...


class SafeKV:
    """A `KV` that never raises: failures become misses, logged once per cool-down, counted.
    A failure of the store opens its circuit (`stores.circuit`): for the cool-down every call
    skips it, then one call tries it. A refusal of one call's own data (`StoreRefused`) is
    counted and logged but opens nothing: one client's bad write must not cool the store down
    for every tenant. Nor does a write that times out: the store is slow with a burst of large
    values (one tenant's 2,048-input embeddings), not gone, and reads, which come first in
    every request, still find it; the write is dropped and counted. Before, one such timeout
    made every tenant's lookups miss for the cool-down, and the misses went upstream and were
    written again (the soak, issue 20). A value over `max_value_bytes` is not sent at all."""

    def __init__(
        self,
        inner: KV,
        *,
        name: str,
        timeout: float,
        cooldown: float,
        max_value_bytes: int,
        clock: Clock,
        on_fault: FaultHook,
    ) -> None:
        self._inner = inner
        self._max_value_bytes = max_value_bytes
        self.name = name
        self._timeout = timeout
        self._cooldown = cooldown
        self._clock = clock
        self._on_fault = on_fault
        self._circuit = Circuit(cooldown=cooldown, clock=clock)
        self._refusals_logged_until = float("-inf")
        self._failures_logged_until = float("-inf")
        self._slow_writes_logged_until = float("-inf")

    async def get(self, key: str) -> bytes | None:
        return await self._run("get", lambda: self._inner.get(key))

    async def set(self, key: str, value: bytes, *, ttl: float) -> None:
        if len(value) > self._max_value_bytes:  # Redis drops the connection over 512 MB
            self._refused("set", StoreRefused(f"a {len(value)}-byte value is over the limit"))
            return
        await self._run("set", lambda: self._inner.set(key, value, ttl=ttl), write=True)

    async def delete(self, key: str) -> None:
        await self._run("delete", lambda: self._inner.delete(key))

    async def _run(
        self, op: str, action: Callable[[], Awaitable[_T]], *, write: bool = False
    ) -> _T | None:
        if not self._circuit.admits():
            self._on_fault(self.name, op, "cooling_down")
            return None
        try:
            async with asyncio.timeout(self._timeout):
                result = await action()
        except StoreRefused as exc:
            self._circuit.succeeded()  # it answered: the store is up
            self._refused(op, exc)
            return None
        except TimeoutError as exc:
            if write:
                self._circuit.abandoned()  # no verdict: the next read decides
                self._on_fault(self.name, op, "timeout")
                self._slow_write()
            else:
                self._circuit.failed()
                self._failed(op, exc)
            return None
        except StoreError as exc:
            self._circuit.failed()
            self._failed(op, exc)
            return None
        except BaseException:
            self._circuit.abandoned()
            raise
        if self._circuit.succeeded():
            log.warning("cache store %r answers again", self.name)
        return result

    def _failed(self, op: str, exc: BaseException) -> None:
        reason = "timeout" if isinstance(exc, TimeoutError) else "error"
        self._on_fault(self.name, op, reason)
        # Logged once per cool-down: a dead store must not flood the log at request rate (the
        # calls already in flight when it died all fail at once, before the circuit opens).
        now = self._clock.now()
        if now >= self._failures_logged_until:
            self._failures_logged_until = now + max(self._cooldown, 1.0)
            log.warning(
                "cache store %r failed on %s (%s: %s); treating as a miss for %.1fs",
                self.name, op, type(exc).__name__, exc or reason, self._cooldown,
            )  # fmt: skip

    def _slow_write(self) -> None:
        now = self._clock.now()
        if now >= self._slow_writes_logged_until:
            self._slow_writes_logged_until = now + max(self._cooldown, 1.0)
            log.warning("cache store %r: a write took over %.2fs, dropped (reads go on)",
                        self.name, self._timeout)  # fmt: skip

    def _refused(self, op: str, exc: StoreRefused) -> None:
        self._on_fault(self.name, op, "refused")
        now = self._clock.now()
        if now >= self._refusals_logged_until:  # a client sending bad data must not flood it
            self._refusals_logged_until = now + max(self._cooldown, 1.0)
            log.warning("cache store %r refused a %s: %s", self.name, op, exc)


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
