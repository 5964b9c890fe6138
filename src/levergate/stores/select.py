"""Where each piece of shared state lives: the one backend-selection rule.

Every store builder (the caches', the limits', the keys' and budgets', the responses', the batch
jobs') asks `choose` and opens what it answers; none reads a `backend` setting itself. The rule,
for a section whose state can live in `kinds` (preferred first):

1. The section's own `backend`, when it is not `auto`.
2. Else the first of `kinds` its connection offers: the one its `connection` names, or
   `stores.default` when it names none and there is one. A section that names a connection
   offering none of its kinds is a configuration error.
3. Else the section's own `auto` rule of earlier releases (`fallback`): `memory` for the
   caches and limits, `sqlite` for keys and batch jobs, the keys' store for budgets, the
   cache's or limits' Redis for responses. With `server.workers` above 1, a `memory` fallback
   becomes `sqlite` where the section can live in it: N worker processes share one machine's
   files and behave as one gateway (server/workers.py).

Then the address (a Redis URL, a Memcached `host:port`, a SQLite file, a PostgreSQL DSN): the
section's own setting when set explicitly (deprecated for URLs, see `deprecations`), else the
connection's (a SQLite file is the section's `file` in the connection's `sqlite_dir`), else the
section's default. `Choice.connection` says whether the connection supplied it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, SecretStr

from levergate.config import DEFAULT_CONNECTION, ConnectionSettings, Settings
from levergate.errors import ConfigError

Backend = Literal["memory", "sqlite", "redis", "memcached", "postgres"]
BACKENDS: tuple[Backend, ...] = ("memory", "sqlite", "redis", "memcached", "postgres")


@dataclass(frozen=True, slots=True)
class Section:
    """One piece of shared state, as its settings section describes it."""

    name: str  # "cache.store": for messages
    kinds: tuple[Backend, ...]  # what it can live in, preferred first
    file: str  # its SQLite file's name in a connection's `sqlite_dir`
    backend: str  # the section's `backend` setting: `auto` or one of BACKENDS
    connection: str | None  # the section's `connection` setting
    fallback: Backend  # `auto` with no connection offering a kind
    # Addresses the section sets itself (explicitly), and its defaults, by backend.
    own: Mapping[Backend, str] = field(default_factory=dict, repr=False)
    defaults: Mapping[Backend, str] = field(default_factory=dict, repr=False)


@dataclass(frozen=True, slots=True)
class Choice:
    backend: Backend
    # The `stores` connection the address came from (None: the section's own settings).
    connection: str | None = None
    # Redis URL, Memcached address, SQLite file or PostgreSQL DSN (a secret: never printed).
    address: str | None = field(default=None, repr=False)
    # The connection's Redis pool timeout (the socket backstop), when it came from one.
    timeout: float | None = None


def choose(
    section: Section, stores: Mapping[str, ConnectionSettings], *, workers: int = 1
) -> Choice:
    """Where `section`'s state lives (the module docstring has the rule)."""
    if workers > 1 and section.fallback == "memory" and "sqlite" in section.kinds:
        section = dataclasses.replace(section, fallback="sqlite")
    name = section.connection
    if name is None and DEFAULT_CONNECTION in stores:
        name = DEFAULT_CONNECTION
    connection = stores.get(name) if name is not None else None
    if name is not None and connection is None:
        raise ConfigError(f"{section.name}.connection names {name!r}, which `stores` lacks")
    offered = connection.kinds() if connection is not None else ()
    backend: Backend
    if section.backend != "auto":
        backend = _backend(section.backend)
    else:
        picked = [kind for kind in section.kinds if kind in offered]
        if not picked and section.connection is not None:
            raise ConfigError(
                f"{section.name}.connection names {name!r}, which offers none of what it can "
                f"live in ({', '.join(section.kinds)}): give that connection one"
            )
        backend = picked[0] if picked else section.fallback
    if backend == "memory":
        return Choice("memory")
    own = section.own.get(backend)
    if own is not None:
        return Choice(backend, address=own)
    if connection is not None and backend in offered:
        address = _address(connection, backend, section.file)
        return Choice(backend, name, address, connection.timeout_seconds)
    return Choice(backend, address=section.defaults.get(backend))


def _backend(value: str) -> Backend:
    for backend in BACKENDS:
        if backend == value:
            return backend
    raise ConfigError(f"unknown store backend {value!r}")


def _address(connection: ConnectionSettings, backend: Backend, file: str) -> str | None:
    if backend == "redis" and connection.redis_url is not None:
        return connection.redis_url.get_secret_value()
    if backend == "postgres" and connection.postgres_dsn is not None:
        return connection.postgres_dsn.get_secret_value()
    if backend == "memcached":
        return connection.memcached_address
    if backend == "sqlite" and connection.sqlite_dir is not None:
        return str(Path(connection.sqlite_dir) / file)
    return None


def _set(model: BaseModel, **fields: str) -> dict[Backend, str]:
    """The addresses among `fields` (backend -> field name) that `model` sets explicitly."""
    found: dict[Backend, str] = {}
    for backend, name in fields.items():
        value = getattr(model, name) if name in model.model_fields_set else None
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        if isinstance(value, str):
            found[_backend(backend)] = value
    return found


# What each piece of state can live in, preferred first, and its file in a `sqlite_dir`.
CACHE: tuple[Backend, ...] = ("redis", "memcached", "sqlite")
SHARED: tuple[Backend, ...] = ("redis", "sqlite")


def cache_store(settings: Settings) -> Choice:
    """The exact, embeddings and semantic caches' entries (`cache.store`)."""
    s = settings.cache.store
    return choose(Section(
        "cache.store", CACHE, "cache.sqlite3", s.backend, s.connection, "memory",
        own=_set(s, redis="redis_url", memcached="memcached_address", sqlite="sqlite_path"),
        defaults={"redis": s.redis_url, "memcached": s.memcached_address,
                  "sqlite": s.sqlite_path},
    ), settings.stores, workers=settings.server.workers)  # fmt: skip


def semantic_index(settings: Settings, cache: Choice) -> Choice:
    """The semantic index: `redis` (shared through the cache's Redis) or `memory` (local).
    `auto` shares it when the cache's Redis came from a `stores` connection."""
    options = settings.cache.semantic
    shared = options.index == "redis" or (
        options.index == "auto" and cache.backend == "redis" and cache.connection is not None
    )
    if not shared:
        return Choice("memory")
    if options.index_redis_url is not None:
        return Choice("redis", address=options.index_redis_url)
    return dataclasses.replace(cache, backend="redis")


def limits(settings: Settings) -> Choice:
    """Rate limits of keys, endpoints and tenants (`traffic`)."""
    t = settings.traffic
    return choose(Section(
        "traffic", SHARED, "limits.sqlite3", t.store, t.connection, "memory",
        own=_set(t, redis="redis_url", sqlite="sqlite_path"),
        defaults={"redis": t.redis_url, "sqlite": t.sqlite_path},
    ), settings.stores, workers=settings.server.workers)  # fmt: skip


def key_store(settings: Settings) -> Choice:
    """Gateway keys made through the admin API (`auth.store`)."""
    s = settings.auth.store
    return choose(Section(
        "auth.store", SHARED, "keys.sqlite3", s.backend, s.connection, "sqlite",
        own=_set(s, redis="redis_url", sqlite="sqlite_path"),
        defaults={"redis": s.redis_url, "sqlite": s.sqlite_path},
    ), settings.stores, workers=settings.server.workers)  # fmt: skip


def spend(settings: Settings, *, keys: Choice, keys_in_sqlite: bool) -> Choice:
    """Keys' spend (`auth.spend`). With no connection, `auto` keeps it where the keys are."""
    s = settings.auth.spend
    fallback: Backend = (
        "redis" if keys.backend == "redis" else "sqlite" if keys_in_sqlite else "memory"
    )
    keys_file = keys.address if keys.backend == "sqlite" else None
    return choose(Section(
        "auth.spend", SHARED, "keys.sqlite3", s.backend, s.connection, fallback,
        own=_set(s, redis="redis_url", sqlite="sqlite_path"),
        defaults={"redis": s.redis_url,
                  "sqlite": keys_file or settings.auth.store.sqlite_path},
    ), settings.stores, workers=settings.server.workers)  # fmt: skip


def responses(settings: Settings) -> Choice:
    """Stored responses (`responses.store`). With no connection, `auto` follows the cache's
    and the limits' stores (config/responses.py)."""
    s = settings.responses.store
    cache, traffic = cache_store(settings), limits(settings)
    fallback: Backend = "memory"
    redis = s.redis_url
    if cache.backend == "redis" or traffic.backend == "redis":
        fallback = "redis"
        redis = redis or (cache.address if cache.backend == "redis" else traffic.address)
    elif cache.backend == "sqlite":
        fallback = "sqlite"
    return choose(Section(
        "responses.store", SHARED, "responses.sqlite3", s.backend, s.connection, fallback,
        own=_set(s, redis="redis_url", sqlite="sqlite_path"),
        defaults={"redis": redis or settings.traffic.redis_url, "sqlite": s.sqlite_path},
    ), settings.stores, workers=settings.server.workers)  # fmt: skip


def batch_jobs(settings: Settings) -> Choice:
    """Batch jobs, their lines and async requests (`batch.store`)."""
    s = settings.batch.store
    return choose(Section(
        "batch.store", ("postgres", "sqlite"), "batch.sqlite3", s.backend, s.connection,
        "sqlite", own=_set(s, postgres="postgres_dsn", sqlite="sqlite_path"),
        defaults={"sqlite": s.sqlite_path},
    ), settings.stores, workers=settings.server.workers)  # fmt: skip


def request_log(settings: Settings) -> Choice:
    """The request log's records (`request_log.store`): PostgreSQL when replicas share one."""
    s = settings.request_log.store
    return choose(Section(
        "request_log.store", ("postgres", "sqlite"), "requests.sqlite3", s.backend, s.connection,
        "sqlite", own=_set(s, postgres="postgres_dsn", sqlite="sqlite_path"),
        defaults={"sqlite": s.sqlite_path},
    ), settings.stores, workers=settings.server.workers)  # fmt: skip


# The per-section addresses `stores` replaces: (section, field).
_DEPRECATED = (
    ("traffic", "redis_url"),
    ("cache.store", "redis_url"),
    ("cache.store", "memcached_address"),
    ("cache.semantic", "index_redis_url"),
    ("auth.store", "redis_url"),
    ("auth.spend", "redis_url"),
    ("responses.store", "redis_url"),
    ("batch.store", "postgres_dsn"),
)


def deprecations(settings: Settings) -> list[str]:
    """One line for each per-section address the configuration sets: each still works in this
    release, and the next one drops it."""
    lines = []
    for section, name in _DEPRECATED:
        model: BaseModel = settings
        for part in section.split("."):
            model = getattr(model, part)
        if name not in model.model_fields_set:
            continue
        key = name.removeprefix("index_")
        where = "cache.store" if section == "cache.semantic" else section
        lines.append(
            f"{section}.{name} is deprecated and will be removed in the next release: set "
            f"stores.default.{key} (every section uses it), or define a connection in `stores` "
            f"and name it with {where}.connection"
        )
    return lines
