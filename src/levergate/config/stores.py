"""Named store connections (`stores:`): where shared state lives, said once.

Every piece of state a gateway keeps — rate limits, the exact, embeddings and semantic caches
(entries and index), gateway keys, their budgets, stored responses, batch jobs — names a
connection here by `connection:` in its own section, and takes from it what it can live in
(stores/select.py decides, in one function). A section that names none takes the connection
called `default`, so one entry moves everything at once:

    stores:
      default: {redis_url: "redis://redis:6379/0", postgres_dsn: "postgresql://pg/levergate"}

makes limits, caches, the semantic index, keys, budgets and responses Redis's (each under its
own key prefix) and batch jobs PostgreSQL's. A section's own `backend` still wins when set. A
connection is opened once per gateway: every section on one Redis URL shares one connection
pool (stores/registry.py), closed once when the gateway closes.

The per-section addresses of earlier releases (`traffic.redis_url`, `cache.store.redis_url`,
`cache.store.memcached_address`, `cache.semantic.index_redis_url`, `auth.store.redis_url`,
`auth.spend.redis_url`, `responses.store.redis_url`, `batch.store.postgres_dsn`) still work in
this release, and the gateway logs a warning naming the `stores` key that replaces each.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, SecretStr, StringConstraints

from levergate.config.base import _Strict

# The connection a section uses when it names none.
DEFAULT_CONNECTION = "default"
ConnectionName = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_-]{0,62}$")]
# `host:port` (`[::1]:11211` for IPv6).
MEMCACHED_ADDRESS = r"^(\[[0-9a-fA-F:.]+\]|[^\s:\[\]]+):\d{1,5}$"


class ConnectionSettings(_Strict):
    """One named connection: the engines it reaches. A section takes the first it can live in
    (stores/select.py lists each section's order); a connection may name several."""

    # `redis://[:password@]host:port/db` (`rediss://` for TLS). A secret: it may carry a password.
    redis_url: SecretStr | None = None
    # psycopg conninfo, e.g. "postgresql://postgres@127.0.0.1:5432/levergate" (a secret).
    postgres_dsn: SecretStr | None = None
    memcached_address: str | None = Field(None, pattern=MEMCACHED_ADDRESS)
    # A folder for SQLite files, one per section (cache.sqlite3, keys.sqlite3, ...): one
    # machine's state that survives restarts. A section's own `sqlite_path` wins when set.
    sqlite_dir: str | None = None
    # The Redis pool's socket timeouts: a backstop for a dead server. Each section bounds its
    # own calls tighter (cache.store.timeout_seconds 0.1 s, traffic.redis_timeout_seconds
    # 1 s, ...); this must stay above the semantic index's 1 s blocking read.
    timeout_seconds: float = Field(5.0, ge=2.0)

    def kinds(self) -> tuple[str, ...]:
        """The engines this connection names."""
        named = {
            "redis": self.redis_url,
            "postgres": self.postgres_dsn,
            "memcached": self.memcached_address,
            "sqlite": self.sqlite_dir,
        }
        return tuple(kind for kind, value in named.items() if value is not None)


Stores = dict[ConnectionName, ConnectionSettings]
