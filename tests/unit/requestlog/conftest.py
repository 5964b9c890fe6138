"""The log store each test here that asks for `store` runs against: SQLite, then PostgreSQL (a
fresh database named after the test module, so modules on parallel workers never share one)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from levergate.requestlog.store import LogStore, PostgresLog, SqliteLog
from tests.postgres_required import postgres_database


@pytest.fixture(params=["sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[LogStore]:
    if request.param == "sqlite":
        found: LogStore = SqliteLog(str(tmp_path / "log.sqlite3"), timeout_seconds=5)
        yield found
        found.close()
        return
    module = request.module.__name__.rsplit(".", 1)[-1]
    async with postgres_database(f"levergate_log_{module}") as dsn:
        found = PostgresLog(dsn, timeout_seconds=5)
        yield found
        found.close()
