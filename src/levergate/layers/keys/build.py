"""Build the gateway keys' state from settings, where `stores.select` says keys and spend
live. `Shared.build` keeps the result, so `Authenticate` (the request path), Measure's budget
sink and the admin API (server/admin.py) all see the same keyring and spend."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from levergate.config import Settings
from levergate.core.clock import Clock
from levergate.core.jobs import BackgroundJob
from levergate.layers.keys.keyring import Keyring
from levergate.layers.keys.quota import Budgets, KeyQuota
from levergate.layers.traffic.metrics import TrafficMetrics
from levergate.stores import select
from levergate.stores.keys import KeyStore, MemoryKeyStore
from levergate.stores.keys_sqlite import SqliteKeyStore
from levergate.stores.limits import LimitStore
from levergate.stores.registry import StoreRegistry
from levergate.stores.spend import MemorySpendStore, RedisSpendStore
from levergate.stores.spend_sqlite import SqliteSpendStore


@dataclass(frozen=True)
class KeyKit:
    keyring: Keyring
    quota: KeyQuota
    budgets: Budgets


def build_keys(
    settings: Settings,
    *,
    clock: Clock,
    limit_store: LimitStore,
    metrics: TrafficMetrics,
    closers: list[Callable[[], Awaitable[None]]],
    jobs: list[BackgroundJob],
    stores: StoreRegistry,
    wall: Callable[[], float] = time.time,
) -> KeyKit | None:
    """The keys' state, or None when neither auth nor the admin API is on. What it opens goes
    on `closers`; the job that writes owed spend to the store goes on `jobs`. Where keys and
    spend live: `stores.select` (`key_store`, `spend`); a Redis on `stores`' shared pool."""
    auth = settings.auth
    if not auth.enabled and not settings.admin.enabled:
        return None
    store = _key_store(settings, stores=stores)
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
    in_sqlite = isinstance(store, SqliteKeyStore)
    spend = _spend_store(settings, stores=stores, keys_in_sqlite=in_sqlite)
    budgets = Budgets(store=spend, clock=clock, wall=wall, flush_seconds=auth.spend.flush_seconds)
    # At close: what is still owed is written before the store goes.
    closers.extend([budgets.flush, spend.aclose])
    jobs.append(BackgroundJob("budgets", budgets.run))
    t = settings.traffic
    quota = KeyQuota(
        budgets=budgets,
        store=limit_store,
        clock=clock,
        max_wait=t.max_wait,
        max_queue=t.max_queue,
        metrics=metrics,
    )
    return KeyKit(keyring=keyring, quota=quota, budgets=budgets)


def _key_store(settings: Settings, *, stores: StoreRegistry) -> KeyStore | None:
    s = settings.auth.store
    choice = select.key_store(settings)
    if choice.backend == "memory":
        return MemoryKeyStore()
    if choice.backend == "redis":
        from levergate.stores.keys_redis import RedisKeyStore

        return RedisKeyStore(stores.redis(choice, what="auth.store"), prefix=s.redis_prefix)
    path = choice.address or s.sqlite_path
    # Only the admin API writes keys: without it and without the file there are none to read,
    # and a gateway with config keys only then creates no file.
    if not settings.admin.enabled and not Path(path).exists():
        return None
    return SqliteKeyStore(path, busy_timeout=s.timeout_seconds)


def _spend_store(
    settings: Settings, *, stores: StoreRegistry, keys_in_sqlite: bool
) -> MemorySpendStore | SqliteSpendStore | RedisSpendStore:
    s = settings.auth.spend
    keys = select.key_store(settings)
    choice = select.spend(settings, keys=keys, keys_in_sqlite=keys_in_sqlite)
    if choice.backend == "sqlite":
        path = choice.address or settings.auth.store.sqlite_path
        return SqliteSpendStore(path, busy_timeout=s.timeout_seconds)
    if choice.backend == "redis":
        client = stores.redis(choice, what="auth.spend")
        return RedisSpendStore(client, prefix=s.redis_prefix, timeout=s.timeout_seconds)
    return MemorySpendStore()
