"""`SqliteKeyStore`: key records in one SQLite file, the default for a single machine.

As in `SqliteKV`, one worker thread owns the connection and the event loop only awaits it. WAL
lets another gateway process on the same machine read while this one writes (two `levergate
serve` processes on one file see each other's keys). A row holds the record as JSON beside the
two columns it is found by: `id` (primary key) and `hash` (unique, what a request looks up).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from levergate.stores.keys import KeyRecord, KeyStoreError

T = TypeVar("T")

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS api_keys ("
    " id TEXT PRIMARY KEY, hash TEXT NOT NULL UNIQUE, tenant TEXT NOT NULL,"
    " created REAL NOT NULL, record BLOB NOT NULL)"
)


class SqliteKeyStore:
    def __init__(self, path: str | Path, *, busy_timeout: float) -> None:
        self._path = str(path)
        self._busy_ms = max(1, int(busy_timeout * 1000))
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="levergate-keys")
        self._conn: sqlite3.Connection | None = None

    async def get(self, key_hash: str) -> KeyRecord | None:
        row = await self._run(
            lambda c: c.execute(
                "SELECT record FROM api_keys WHERE hash = ?", (key_hash,)
            ).fetchone()
        )
        return None if row is None else KeyRecord.from_bytes(row[0])

    async def put(self, record: KeyRecord) -> None:
        args = (record.id, record.hash, record.tenant, record.created, record.to_bytes())
        await self._run(
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

        return [KeyRecord.from_bytes(row[0]) for row in await self._run(query)]

    async def aclose(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await asyncio.get_running_loop().run_in_executor(self._executor, conn.close)
        self._executor.shutdown(wait=True)

    async def _run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        def job() -> T:
            if self._conn is None:
                self._conn = self._open()
            return work(self._conn)

        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, job)
        except (sqlite3.Error, OSError, RuntimeError) as exc:  # RuntimeError: store closed
            raise KeyStoreError(f"sqlite {self._path}: {exc}") from exc

    def _open(self) -> sqlite3.Connection:
        Path(self._path).parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self._path, timeout=self._busy_ms / 1000, isolation_level=None)
        conn.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(_SCHEMA)
        return conn
