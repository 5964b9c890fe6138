"""`SqliteSpendStore`: each key's spend per day and month in a SQLite file, so a single
machine's budgets survive a restart (by default the key store's own file, in its own table).

A charge is one upsert per period (`usd = usd + ?`), atomic in SQLite, so two gateway processes
on one file add up exactly. A row expires a day after its period ends; expired rows are purged
every few hundred charges.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from levergate.stores.spend import Periods, SpendUnavailable, Spent
from levergate.stores.sqlite_worker import SqliteWorker

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS spend ("
    " key_id TEXT NOT NULL, period TEXT NOT NULL, usd REAL NOT NULL, expires REAL NOT NULL,"
    " PRIMARY KEY (key_id, period)) WITHOUT ROWID"
)
_UPSERT = (
    "INSERT INTO spend (key_id, period, usd, expires) VALUES (?, ?, ?, ?)"
    " ON CONFLICT (key_id, period) DO UPDATE SET usd = usd + excluded.usd"
)
_DAY = 86_400.0
_PURGE_EVERY = 512


class SqliteSpendStore:
    def __init__(self, path: str | Path, *, busy_timeout: float) -> None:
        self._db = SqliteWorker(
            path, busy_timeout=busy_timeout, schema=_SCHEMA, error=SpendUnavailable
        )
        self._charges = 0

    async def spent(self, key_id: str, periods: Periods) -> Spent:
        def read(conn: sqlite3.Connection) -> dict[str, float]:
            rows = conn.execute(
                "SELECT period, usd FROM spend WHERE key_id = ? AND period IN (?, ?)",
                (key_id, "d:" + periods.day, "m:" + periods.month),
            ).fetchall()
            return {period: float(usd) for period, usd in rows}

        found = await self._db.run(read)
        return Spent(
            day=found.get("d:" + periods.day, 0.0), month=found.get("m:" + periods.month, 0.0)
        )

    async def add(self, key_id: str, usd: float, periods: Periods) -> None:
        self._charges += 1
        purge = self._charges % _PURGE_EVERY == 0

        def write(conn: sqlite3.Connection) -> None:
            with conn:
                conn.execute("BEGIN IMMEDIATE")
                conn.execute(_UPSERT, (key_id, "d:" + periods.day, usd, periods.day_ends + _DAY))
                conn.execute(
                    _UPSERT, (key_id, "m:" + periods.month, usd, periods.month_ends + _DAY)
                )
                if purge:
                    conn.execute("DELETE FROM spend WHERE expires < ?", (time.time(),))

        await self._db.run(write)

    async def aclose(self) -> None:
        await self._db.aclose()
