"""`SqliteKV`: entries in one SQLite file, so a single gateway's cache survives restarts.

SQLite is blocking, so every statement runs on one dedicated worker thread that owns the
connection (a connection must not be shared across threads, and one writer is all SQLite allows
anyway). The event loop only awaits the result. WAL journaling lets a second process read while
this one writes; `busy_timeout` bounds how long a statement waits on a lock held elsewhere, and a
lock that outlasts it becomes a `StoreError`, which `SafeKV` turns into a miss.

Expiry is an absolute wall-clock time per row (entries outlive the process, so a monotonic clock
would be meaningless after a restart); expired rows are ignored by reads and purged in small
batches every few hundred writes.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from levergate.stores.kv import StoreError
from levergate.stores.sqlite_worker import connect

T = TypeVar("T")

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS kv ("
    " key TEXT PRIMARY KEY, value BLOB NOT NULL, expires REAL NOT NULL) WITHOUT ROWID"
)
_PURGE_EVERY = 256
_PURGE_BATCH = 1000


class SqliteKV:
    def __init__(
        self,
        path: str | Path,
        *,
        busy_timeout: float = 0.05,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._path = str(path)
        self._busy_ms = max(1, int(busy_timeout * 1000))
        self._wall = wall
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="levergate-sqlite")
        self._conn: sqlite3.Connection | None = None
        self._writes = 0
        # Open the file now, on the worker thread, so the first lookup does not pay for it
        # inside its timeout; an error here surfaces (as a miss) on the first operation.
        self._executor.submit(self._ensure_open)

    def _ensure_open(self) -> sqlite3.Connection:
        if self._conn is None:
            self._conn = self._open()
        return self._conn

    async def get(self, key: str) -> bytes | None:
        return await self._run(lambda conn: self._get(conn, key))

    async def set(self, key: str, value: bytes, *, ttl: float) -> None:
        await self._run(lambda conn: self._set(conn, key, value, ttl))

    async def delete(self, key: str) -> None:
        await self._run(lambda conn: _execute(conn, "DELETE FROM kv WHERE key = ?", (key,)))

    async def aclose(self) -> None:
        if self._conn is not None:
            await self._run(self._close)
        self._executor.shutdown(wait=True)

    async def _run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        def job() -> T:
            return work(self._ensure_open())

        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, job)
        except (sqlite3.Error, OSError) as exc:  # OSError: its folder cannot be made
            raise StoreError(f"sqlite {self._path}: {exc}") from exc
        except RuntimeError as exc:  # the executor is shut down: the store is closed
            raise StoreError(f"sqlite {self._path}: {exc}") from exc

    def _open(self) -> sqlite3.Connection:
        conn = connect(self._path, busy_ms=self._busy_ms)
        conn.execute(_SCHEMA)
        return conn

    def _get(self, conn: sqlite3.Connection, key: str) -> bytes | None:
        row = conn.execute(
            "SELECT value FROM kv WHERE key = ? AND expires > ?", (key, self._wall())
        ).fetchone()
        if row is None:
            return None
        value = row[0]
        if not isinstance(value, bytes):
            raise StoreError(f"sqlite {self._path}: entry {key!r} is not a blob")
        return value

    def _set(self, conn: sqlite3.Connection, key: str, value: bytes, ttl: float) -> None:
        _execute(
            conn,
            "INSERT OR REPLACE INTO kv (key, value, expires) VALUES (?, ?, ?)",
            (key, value, self._wall() + ttl),
        )
        self._writes += 1
        if self._writes % _PURGE_EVERY == 0:
            _execute(
                conn,
                "DELETE FROM kv WHERE key IN (SELECT key FROM kv WHERE expires <= ? LIMIT ?)",
                (self._wall(), _PURGE_BATCH),
            )

    def _close(self, conn: sqlite3.Connection) -> None:
        conn.close()
        self._conn = None


def _execute(conn: sqlite3.Connection, sql: str, args: tuple[object, ...]) -> None:
    conn.execute(sql, args)
