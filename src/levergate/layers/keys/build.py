"""Build the gateway keys' state from settings: the one place `auth.store` and `auth.spend` are
read. `build_pipeline` hands the result to `Authenticate` (the request path) and keeps it on the
`Pipeline` for the admin API (server/admin.py), so both see the same keyring and spend."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from levergate.config import Price, Settings
from levergate.core.clock import Clock
from levergate.layers.keys.keyring import Keyring
from levergate.layers.keys.quota import Budgets, KeyQuota
from levergate.layers.traffic.metrics import TrafficMetrics
from levergate.stores.keys import KeyStore, MemoryKeyStore
from levergate.stores.keys_sqlite import SqliteKeyStore
from levergate.stores.limits import LimitStore
from levergate.stores.spend import MemorySpendStore, RedisSpendStore
from levergate.stores.spend_sqlite import SqliteSpendStore


@dataclass
class KeyKit:
    keyring: Keyring
    quota: KeyQuota
    closers: list[Callable[[], Awaitable[None]]] = field(default_factory=list)

    @property
    def budgets(self) -> Budgets | None:
        return self.quota.budgets

    async def aclose(self) -> None:
        for close in self.closers:
            await close()


def build_keys(
    settings: Settings,
    *,
    clock: Clock,
    limit_store: LimitStore,
    metrics: TrafficMetrics,
    prices: Mapping[str, Price],
    wall: Callable[[], float] = time.time,
) -> KeyKit | None:
    """The keys' state, or None when neither auth nor the admin API is on."""
    auth = settings.auth
    if not auth.enabled and not settings.admin.enabled:
        return None
    closers: list[Callable[[], Awaitable[None]]] = []
    store = _key_store(settings)
    if store is not None and (close := getattr(store, "aclose", None)) is not None:
        closers.append(close)
    keyring = Keyring(
        config_keys=auth.keys,
        store=store,
        clock=clock,
        cache_seconds=auth.store.cache_seconds,
        timeout=auth.store.timeout_seconds,
        wall=wall,
    )
    spend = _spend_store(settings, keys_in_sqlite=isinstance(store, SqliteKeyStore))
    closers.append(spend.aclose)
    budgets = Budgets(store=spend, clock=clock, wall=wall)
    t = settings.traffic
    quota = KeyQuota(
        budgets=budgets,
        prices=prices,
        store=limit_store,
        clock=clock,
        max_wait=t.max_wait,
        max_queue=t.max_queue,
        metrics=metrics,
    )
    return KeyKit(keyring=keyring, quota=quota, closers=closers)


def _key_store(settings: Settings) -> KeyStore | None:
    s = settings.auth.store
    if s.backend == "memory":
        return MemoryKeyStore()
    if s.backend == "redis":
        from levergate.stores.keys_redis import RedisKeyStore, redis_client

        client = redis_client(url=s.redis_url, timeout=s.timeout_seconds, what="auth.store")
        return RedisKeyStore(client, prefix=s.redis_prefix)
    # Only the admin API writes keys: without it and without the file there are none to read,
    # and a gateway with config keys only then creates no file.
    if not settings.admin.enabled and not Path(s.sqlite_path).exists():
        return None
    return SqliteKeyStore(s.sqlite_path, busy_timeout=s.timeout_seconds)


def _spend_store(
    settings: Settings, *, keys_in_sqlite: bool
) -> MemorySpendStore | SqliteSpendStore | RedisSpendStore:
    s = settings.auth.spend
    backend = s.backend
    if backend == "auto":
        store = settings.auth.store.backend
        backend = "redis" if store == "redis" else "sqlite" if keys_in_sqlite else "memory"
    if backend == "memory":
        return MemorySpendStore()
    if backend == "sqlite":
        path = s.sqlite_path or settings.auth.store.sqlite_path
        return SqliteSpendStore(path, busy_timeout=s.timeout_seconds)
    from levergate.stores.keys_redis import redis_client

    client = redis_client(url=s.redis_url, timeout=s.timeout_seconds, what="auth.spend")
    return RedisSpendStore(client, prefix=s.redis_prefix)
