"""`SqliteWorker`: one SQLite connection owned by one worker thread, for the stores that keep
small records in a file (gateway keys, their spend).

SQLite is blocking and a connection must stay on one thread, so every statement runs on the
worker and the event loop only awaits it. WAL lets other gateway processes on the machine read
while this one writes; `busy_timeout` bounds a wait on a lock held elsewhere. Every failure —
a locked or corrupt file, a folder that cannot be made, a closed worker — becomes `error`.

`connect` is the one way the SQLite stores open their file (this worker, the KV store, the batch
store).
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def connect(
    path: str, *, busy_ms: int, synchronous: str = "NORMAL", any_thread: bool = False,
    page_size: int = 0,
) -> sqlite3.Connection:  # fmt: skip
    """A WAL connection to `path` (its folder made), statements waiting up to `busy_ms` on a
    lock held elsewhere; with `any_thread`, usable from a thread other than the one that made
    it (the caller keeps two from using it at once). Switching a new file to WAL takes an
    exclusive lock for which SQLite does not call its busy handler: two processes opening one
    new file at once saw "database is locked" at once (9 runs in 40 of a two-process test), so
    the switch is retried until the same deadline. `page_size` (bytes, a power of two from 512
    to 65536; 0: SQLite's, 4096) is a new file's: once a file is in WAL mode its pages keep
    their size."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, timeout=busy_ms / 1000, isolation_level=None,
                           check_same_thread=not any_thread)  # fmt: skip
    try:
        conn.execute(f"PRAGMA busy_timeout = {busy_ms}")
        if page_size:  # before the switch to WAL, which writes a new file's first page
            conn.execute(f"PRAGMA page_size = {int(page_size)}")
        deadline = time.monotonic() + busy_ms / 1000
        while True:
            try:
                conn.execute("PRAGMA journal_mode = WAL")
                break
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() >= deadline:
                    raise
                time.sleep(0.005)
        conn.execute(f"PRAGMA synchronous = {synchronous}")
    except BaseException:
        conn.close()
        raise
    return conn


class SqliteWorker:
    def __init__(
        self, path: str | Path, *, busy_timeout: float, schema: str, error: type[Exception]
    ) -> None:
        self.path = str(path)
        self._busy_ms = max(1, int(busy_timeout * 1000))
        self._schema = schema
        self._error = error
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="levergate-sqlite")
        self._conn: sqlite3.Connection | None = None

    async def run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        def job() -> T:
            if self._conn is None:
                self._conn = self._open()
            return work(self._conn)

        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, job)
        except (sqlite3.Error, OSError, RuntimeError) as exc:  # RuntimeError: worker closed
            raise self._error(f"sqlite {self.path}: {exc}") from exc

    async def aclose(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await asyncio.get_running_loop().run_in_executor(self._executor, conn.close)
        self._executor.shutdown(wait=True)

    def _open(self) -> sqlite3.Connection:
        conn = connect(self.path, busy_ms=self._busy_ms)
        conn.execute(self._schema)
        return conn
