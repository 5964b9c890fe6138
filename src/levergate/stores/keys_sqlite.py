"""`SqliteKeyStore`: key records in one SQLite file, the default for a single machine.

A row holds the record as JSON beside the two columns it is found by: `id` (primary key) and
`hash` (unique, what a request looks up). WAL (see `SqliteWorker`) lets two `levergate serve`
processes on one machine share the file and see each other's keys.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from levergate.stores.keys import KeyRecord, KeyStoreError
from levergate.stores.sqlite_worker import SqliteWorker

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS api_keys ("
    " id TEXT PRIMARY KEY, hash TEXT NOT NULL UNIQUE, tenant TEXT NOT NULL,"
    " created REAL NOT NULL, record BLOB NOT NULL)"
)


class SqliteKeyStore:
    def __init__(self, path: str | Path, *, busy_timeout: float) -> None:
        self._db = SqliteWorker(
            path, busy_timeout=busy_timeout, schema=_SCHEMA, error=KeyStoreError
        )

    async def get(self, key_hash: str) -> KeyRecord | None:
        sql = "SELECT record FROM api_keys WHERE hash = ?"
        row = await self._db.run(lambda c: c.execute(sql, (key_hash,)).fetchone())
        return None if row is None else KeyRecord.from_bytes(row[0])

    async def put(self, record: KeyRecord) -> None:
        args = (record.id, record.hash, record.tenant, record.created, record.to_bytes())
        await self._db.run(
            lambda c: c.execute(
                "INSERT OR REPLACE INTO api_keys (id, hash, tenant, created, record)"
                " VALUES (?, ?, ?, ?, ?)",
                args,
            )
        )

    async def list(self, tenant: str | None = None) -> list[KeyRecord]:
        def query(conn: sqlite3.Connection) -> list[tuple[bytes]]:
            if tenant is None:
                return conn.execute("SELECT record FROM api_keys ORDER BY created, id").fetchall()
            return conn.execute(
                "SELECT record FROM api_keys WHERE tenant = ? ORDER BY created, id", (tenant,)
            ).fetchall()

        return [KeyRecord.from_bytes(row[0]) for row in await self._db.run(query)]

    async def aclose(self) -> None:
        await self._db.aclose()
