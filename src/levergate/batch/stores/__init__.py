"""JobStore implementations: SQLite (one process) and PostgreSQL (replicas sharing the work)."""

from __future__ import annotations

from levergate.batch.store import Store
from levergate.config.batch import BatchStore


def open_store(settings: BatchStore) -> Store:
    """The store `batch.store` names; nothing connects until the first statement."""
    if settings.backend == "postgres":
        from levergate.batch.stores.postgres import PostgresStore
        from levergate.errors import ConfigError

        if settings.postgres_dsn is None:
            raise ConfigError(
                "batch.store.backend is postgres but batch.store.postgres_dsn is unset"
            )
        return PostgresStore(
            settings.postgres_dsn.get_secret_value(), timeout=settings.timeout_seconds
        )
    from levergate.batch.stores.sqlite import SqliteStore

    return SqliteStore(settings.sqlite_path, timeout=settings.timeout_seconds)
