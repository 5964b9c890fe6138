"""`SqliteTenantKV`: the `TenantKV` policy (stores/tenant_kv.py) in one SQLite file, so one
gateway's stored responses survive a restart and the file never outgrows its bound.

Each write is one `BEGIN IMMEDIATE` transaction on the worker thread (stores/sqlite_worker.py):
insert, purge expired rows, evict the tenant's own least recently used rows while it is over
its bound, then those of the largest tenant while the file is over the total. Bytes per tenant
and in total are kept in their own rows beside the entries, so no write sums a table. Times are
wall-clock seconds (entries outlive the process).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from levergate.stores.kv import StoreError
from levergate.stores.sqlite_worker import SqliteWorker, connect
from levergate.stores.tenant_kv import PURGE_PER_WRITE, Bounds

T = TypeVar("T")

SCHEMA = """
CREATE TABLE IF NOT EXISTS tenant_entries (
  tenant TEXT NOT NULL, key TEXT NOT NULL, value BLOB NOT NULL, cost INTEGER NOT NULL,
  used REAL NOT NULL, PRIMARY KEY (tenant, key));
CREATE INDEX IF NOT EXISTS tenant_entries_lru ON tenant_entries (tenant, used);
CREATE INDEX IF NOT EXISTS tenant_entries_used ON tenant_entries (used);
CREATE TABLE IF NOT EXISTS tenant_bytes (tenant TEXT PRIMARY KEY, bytes INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS tenant_bytes_most ON tenant_bytes (bytes);
CREATE TABLE IF NOT EXISTS tenant_total (one INTEGER PRIMARY KEY CHECK (one = 1),
  bytes INTEGER NOT NULL);
INSERT OR IGNORE INTO tenant_total (one, bytes) VALUES (1, 0);
"""


class _Worker(SqliteWorker):
    def _open(self) -> sqlite3.Connection:
        conn = connect(self.path, busy_ms=self._busy_ms)
        conn.executescript(SCHEMA)
        return conn


class SqliteTenantKV:
    def __init__(
        self,
        path: str | Path,
        *,
        bounds: Bounds,
        busy_timeout: float,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._bounds = bounds
        self._wall = wall
        self._db = _Worker(path, busy_timeout=busy_timeout, schema="", error=StoreError)

    async def aclose(self) -> None:
        await self._db.aclose()

    async def put(self, tenant: str, key: str, value: bytes) -> None:
        cost = self._bounds.cost(key, value)
        self._bounds.refuse_over(cost)
        await self._db.run(
            lambda c: _in_transaction(c, lambda: self._put(c, tenant, key, value, cost))
        )

    async def get(self, tenant: str, keys: Sequence[str]) -> list[bytes | None]:
        return await self._db.run(lambda c: _in_transaction(c, lambda: self._get(c, tenant, keys)))

    async def delete(self, tenant: str, key: str) -> bool:
        return await self._db.run(lambda c: _in_transaction(c, lambda: _drop(c, tenant, key)))

    async def bytes_of(self, tenant: str) -> int:
        def work(c: sqlite3.Connection) -> int:
            row = c.execute("SELECT bytes FROM tenant_bytes WHERE tenant = ?", (tenant,)).fetchone()
            return int(row[0]) if row is not None else 0

        return await self._db.run(work)

    def _put(self, c: sqlite3.Connection, tenant: str, key: str, value: bytes, cost: int) -> None:
        now = self._wall()
        _drop(c, tenant, key)
        c.execute("INSERT INTO tenant_entries (tenant, key, value, cost, used) "
                  "VALUES (?, ?, ?, ?, ?)", (tenant, key, value, cost, now))  # fmt: skip
        _account(c, tenant, cost)
        for gone, gone_key in c.execute(
            "SELECT tenant, key FROM tenant_entries WHERE used <= ? ORDER BY used LIMIT ?",
            (now - self._bounds.ttl, PURGE_PER_WRITE),
        ).fetchall():
            _drop(c, gone, gone_key)
        while _held(c, tenant) > self._bounds.tenant_bytes:
            if not _evict_oldest(c, tenant, keep=key):
                break
        while _total(c) > self._bounds.total_bytes:
            largest = c.execute(
                "SELECT tenant FROM tenant_bytes ORDER BY bytes DESC, tenant LIMIT 2"
            ).fetchall()
            if not any(_evict_oldest(c, row[0], keep=key if row[0] == tenant else None)
                       for row in largest):  # fmt: skip
                break

    def _get(self, c: sqlite3.Connection, tenant: str, keys: Sequence[str]) -> list[bytes | None]:
        now = self._wall()
        found: list[bytes | None] = []
        for key in keys:
            row = c.execute("SELECT value, used FROM tenant_entries WHERE tenant = ? AND key = ?",
                            (tenant, key)).fetchone()  # fmt: skip
            if row is not None and now - float(row[1]) >= self._bounds.ttl:
                _drop(c, tenant, key)
                row = None
            if row is None:
                found.append(None)
                continue
            c.execute("UPDATE tenant_entries SET used = ? WHERE tenant = ? AND key = ?",
                      (now, tenant, key))  # fmt: skip
            found.append(bytes(row[0]))
        return found


def _in_transaction(c: sqlite3.Connection, work: Callable[[], T]) -> T:
    c.execute("BEGIN IMMEDIATE")
    try:
        result = work()
    except BaseException:
        c.execute("ROLLBACK")
        raise
    c.execute("COMMIT")
    return result


def _drop(c: sqlite3.Connection, tenant: str, key: str) -> bool:
    row = c.execute("DELETE FROM tenant_entries WHERE tenant = ? AND key = ? RETURNING cost",
                    (tenant, key)).fetchone()  # fmt: skip
    if row is None:
        return False
    _account(c, tenant, -int(row[0]))
    return True


def _evict_oldest(c: sqlite3.Connection, tenant: str, *, keep: str | None) -> bool:
    row = c.execute(
        "SELECT key FROM tenant_entries WHERE tenant = ? AND key IS NOT ? ORDER BY used LIMIT 1",
        (tenant, keep),
    ).fetchone()
    return row is not None and _drop(c, tenant, row[0])


def _account(c: sqlite3.Connection, tenant: str, change: int) -> None:
    c.execute("INSERT INTO tenant_bytes (tenant, bytes) VALUES (?, ?) ON CONFLICT (tenant) "
              "DO UPDATE SET bytes = bytes + excluded.bytes", (tenant, change))  # fmt: skip
    c.execute("UPDATE tenant_total SET bytes = bytes + ?", (change,))
    c.execute("DELETE FROM tenant_bytes WHERE tenant = ? AND bytes <= 0", (tenant,))


def _held(c: sqlite3.Connection, tenant: str) -> int:
    row = c.execute("SELECT bytes FROM tenant_bytes WHERE tenant = ?", (tenant,)).fetchone()
    return int(row[0]) if row is not None else 0


def _total(c: sqlite3.Connection) -> int:
    return int(c.execute("SELECT bytes FROM tenant_total").fetchone()[0])
