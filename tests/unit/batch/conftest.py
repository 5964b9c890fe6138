"""The batch job store each test here runs against: SQLite, then PostgreSQL (a fresh database
named after the test module, so modules on parallel workers never share one)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from levergate.batch.store import Store
from levergate.batch.stores.postgres import PostgresStore
from levergate.batch.stores.sqlite import SqliteStore
from tests.postgres_required import postgres_database


@pytest.fixture(params=["sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    if request.param == "sqlite":
        sqlite = SqliteStore(tmp_path / "b.sqlite3", timeout=5)
        yield sqlite
        await sqlite.aclose()
        return
    module = request.module.__name__.rsplit(".", 1)[-1]
    async with postgres_database(f"levergate_{module}") as dsn:
        pg = PostgresStore(dsn, timeout=5)
        yield pg
        await pg.aclose()
