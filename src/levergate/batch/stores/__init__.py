"""JobStore implementations: SQLite (one process) and PostgreSQL (replicas sharing the work)."""

from __future__ import annotations

from levergate.batch.store import Store
from levergate.config.batch import BatchStoreSettings
from levergate.stores.select import Choice


def open_store(settings: BatchStoreSettings, *, where: Choice) -> Store:
    """The store `where` names (`stores.select.batch_jobs`); nothing connects until the first
    statement."""
    if where.backend == "postgres":
        from levergate.batch.stores.postgres import PostgresStore
        from levergate.errors import ConfigError

        if where.address is None:
            raise ConfigError(
                "batch.store.backend is postgres but no PostgreSQL DSN is set: set "
                "stores.default.postgres_dsn (or a connection batch.store.connection names)"
            )
        return PostgresStore(where.address, timeout=settings.timeout_seconds)
    from levergate.batch.stores.sqlite import SqliteStore

    return SqliteStore(where.address or settings.sqlite_path, timeout=settings.timeout_seconds)
