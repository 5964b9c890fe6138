"""Build the cache's store from settings: the one place `cache.store.backend` is read.

Returns the store the cache layers use and the things to close when the gateway stops. Every
store that can fail (SQLite, Redis) is wrapped in `SafeKV`, so no store failure ever fails a
request; the in-process memory store cannot, and is used as it is.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from levergate.config import CacheStore
from levergate.core.clock import Clock
from levergate.stores.kv import KV, FaultHook, SafeKV, TieredKV
from levergate.stores.kv_memory import MemoryKV


@dataclass
class BuiltStore:
    kv: KV
    closers: list[Callable[[], Awaitable[None]]] = field(default_factory=list)

    async def aclose(self) -> None:
        for close in self.closers:
            await close()


def build_store(settings: CacheStore, *, clock: Clock, on_fault: FaultHook) -> BuiltStore:
    if settings.backend == "memory":
        return BuiltStore(MemoryKV(max_bytes=settings.memory_bytes, clock=clock))
    back: KV
    closers: list[Callable[[], Awaitable[None]]] = []
    if settings.backend == "sqlite":
        from levergate.stores.kv_sqlite import SqliteKV

        sqlite = SqliteKV(settings.sqlite_path, busy_timeout=settings.timeout_seconds)
        back, closers = sqlite, [sqlite.aclose]
    else:
        from levergate.stores.kv_redis import RedisKV

        redis = RedisKV(
            url=settings.redis_url, prefix=settings.redis_prefix, timeout=settings.timeout_seconds
        )
        back, closers = redis, [redis.aclose]
    safe = SafeKV(
        back,
        name=settings.backend,
        timeout=settings.timeout_seconds,
        cooldown=settings.cooldown_seconds,
        max_value_bytes=settings.max_entry_bytes,
        clock=clock,
        on_fault=on_fault,
    )
    if settings.front_bytes == 0:
        return BuiltStore(safe, closers)
    front = MemoryKV(max_bytes=settings.front_bytes, clock=clock)
    return BuiltStore(TieredKV(front, safe, front_ttl=settings.front_ttl_seconds), closers)
