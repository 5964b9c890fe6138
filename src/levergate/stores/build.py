"""Build the cache's store where `stores.select.cache_store` says its entries live.

Returns the store the cache layers use and the things to close when the gateway stops. Every
store that can fail (SQLite, Redis, Memcached) is wrapped in `SafeKV`, so no store failure ever
fails a request; the in-process memory store cannot, and is used as it is.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from levergate.config import CacheStoreSettings
from levergate.core.clock import Clock
from levergate.stores.kv import KV, FaultHook, SafeKV, TieredKV
from levergate.stores.kv_memory import MemoryKV
from levergate.stores.registry import StoreRegistry
from levergate.stores.select import Choice


@dataclass
class BuiltStore:
    kv: KV
    closers: list[Callable[[], Awaitable[None]]] = field(default_factory=list)

    async def aclose(self) -> None:
        for close in self.closers:
            await close()


def build_store(
    settings: CacheStoreSettings,
    *,
    choice: Choice,
    registry: StoreRegistry,
    clock: Clock,
    on_fault: FaultHook,
) -> BuiltStore:
    """The store `choice` names; a Redis one on the registry's shared pool."""
    if choice.backend == "memory":
        return BuiltStore(MemoryKV(max_bytes=settings.memory_bytes, clock=clock))
    back: KV
    closers: list[Callable[[], Awaitable[None]]] = []
    if choice.backend == "sqlite":
        from levergate.stores.kv_sqlite import SqliteKV

        sqlite = SqliteKV(choice.address or settings.sqlite_path,
                          busy_timeout=settings.timeout_seconds)  # fmt: skip
        back, closers = sqlite, [sqlite.aclose]
    elif choice.backend == "memcached":
        from levergate.stores.kv_memcached import connect_memcached

        address = choice.address or settings.memcached_address
        memcached = connect_memcached(settings, address=address)
        back, closers = memcached, [memcached.aclose]
    else:
        from levergate.stores.kv_redis import RedisKV

        client = registry.redis(choice, what="cache.store")
        redis = RedisKV(url="", prefix=settings.redis_prefix, timeout=settings.timeout_seconds,
                        client=client)  # fmt: skip
        back, closers = redis, [redis.aclose]
    safe = SafeKV(
        back,
        name=choice.backend,
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
