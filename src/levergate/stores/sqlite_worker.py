"""`SqliteWorker`: one SQLite connection owned by one worker thread, for the stores that keep
small records in a file (gateway keys, their spend).

SQLite is blocking and a connection must stay on one thread, so every statement runs on the
worker and the event loop only awaits it. WAL lets other gateway processes on the machine read
while this one writes; `busy_timeout` bounds a wait on a lock held elsewhere. Every failure —
a locked or corrupt file, a folder that cannot be made, a closed worker — becomes `error`.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


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
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, timeout=self._busy_ms / 1000, isolation_level=None)
        conn.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(self._schema)
        return conn
