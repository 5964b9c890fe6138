"""Build the gateway keys' state from settings: the one place `auth.store` and `auth.spend` are
read. `Shared.build` keeps the result, so `Authenticate` (the request path), Measure's budget
sink and the admin API (server/admin.py) all see the same keyring and spend."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from levergate.config import Settings
from levergate.core.clock import Clock
from levergate.core.jobs import Job
from levergate.layers.keys.keyring import Keyring
from levergate.layers.keys.quota import Budgets, KeyQuota
from levergate.layers.traffic.metrics import TrafficMetrics
from levergate.stores.keys import KeyStore, MemoryKeyStore
from levergate.stores.keys_sqlite import SqliteKeyStore
from levergate.stores.limits import LimitStore
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
    jobs: list[Job],
    wall: Callable[[], float] = time.time,
) -> KeyKit | None:
    """The keys' state, or None when neither auth nor the admin API is on. What it opens goes
    on `closers`; the job that writes owed spend to the store goes on `jobs`."""
    auth = settings.auth
    if not auth.enabled and not settings.admin.enabled:
        return None
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
    budgets = Budgets(store=spend, clock=clock, wall=wall, flush_seconds=auth.spend.flush_seconds)
    # At close: what is still owed is written before the store goes.
    closers.extend([budgets.flush, spend.aclose])
    jobs.append(Job("budgets", budgets.run))
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


def _key_store(settings: Settings) -> KeyStore | None:
    s = settings.auth.store
    if s.backend == "memory":
        return MemoryKeyStore()
    if s.backend == "redis":
        from levergate.stores.keys_redis import RedisKeyStore
        from levergate.stores.redis_calls import redis_client

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
    from levergate.stores.redis_calls import redis_client

    client = redis_client(url=s.redis_url, timeout=s.timeout_seconds, what="auth.spend")
    return RedisSpendStore(client, prefix=s.redis_prefix)
