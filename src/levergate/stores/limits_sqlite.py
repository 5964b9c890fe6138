"""Rate limits shared by the gateway processes of one machine: GCRA in a SQLite file.

What `levergate serve --workers N` uses when no Redis is configured, so that N workers admit
what one would (the limit never multiplies by N). Each check is one `BEGIN IMMEDIATE`
transaction: it reads every key of a request's charges, decides, and writes all of them or
none, while the other processes wait on the file's write lock (`busy_timeout`) — the same
all-or-nothing as the Redis store's Lua script. Time is the wall clock (`time.time`), which
every process on the machine reads alike (a monotonic clock would not survive a restart of
the file's users). Keys whose TAT is past are idle; they are purged every few thousand checks.

Failures (a lock held past the timeout, a file that cannot be opened) raise `StoreUnavailable`,
and `FailoverLimitStore` answers per process meanwhile, as it does for Redis. The file holds
nothing worth an fsync (`synchronous = OFF`): a TAT lost in a power cut only lets a key start
its next window fresh.

Cost, measured by benchmarks/workers.py (results/workers.md): one write transaction per limited
request, on the event loop.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from levergate.policies import gcra
from levergate.stores.limits import Charge, StoreUnavailable
from levergate.stores.sqlite_worker import connect

_SCHEMA = "CREATE TABLE IF NOT EXISTS tat (key TEXT PRIMARY KEY, tat REAL NOT NULL) WITHOUT ROWID"
_PURGE_EVERY = 4096
# Between tries for another process's write lock (held for tens of microseconds).
_RETRY_SECONDS = 0.00005


class SqliteLimitStore:
    """The store's statements run on the event loop itself, not in a thread: a check is a few
    tens of microseconds and holds the file's lock only for that long (no await inside a
    transaction), while a hop to a thread and back cost more than the statements (measured by
    benchmarks/workers.py). A lock held elsewhere longer than `busy_timeout` is
    `StoreUnavailable`, so the loop is never held longer than that."""

    def __init__(
        self, path: str | Path, *, busy_timeout: float, now: Callable[[], float] = time.time
    ) -> None:
        self.path = str(path)
        self._busy_ms = max(1, int(busy_timeout * 1000))
        self._now = now
        self._conn: sqlite3.Connection | None = None
        self._checks = 0

    async def acquire(self, charges: Sequence[Charge], *, commit: bool = True) -> float:
        if not charges:
            return 0.0
        self._checks += 1
        purge = self._checks % _PURGE_EVERY == 0
        with self._transaction(write=commit) as conn:
            now = self._now()
            tats = _read(conn, charges)
            steps = [
                gcra.check(tat=tats.get(c.key), now=now, cost=c.cost, rate=c.rate) for c in charges
            ]
            wait = max(s.wait for s in steps)
            if wait <= 0 and commit:
                conn.executemany(
                    "INSERT OR REPLACE INTO tat (key, tat) VALUES (?, ?)",
                    [(c.key, s.tat) for c, s in zip(charges, steps, strict=True)],
                )
                if purge:
                    conn.execute("DELETE FROM tat WHERE tat < ?", (now,))
        return wait

    async def adjust(self, charges: Sequence[Charge]) -> None:
        if not charges:
            return
        with self._transaction(write=True) as conn:
            now = self._now()
            tats = _read(conn, charges)
            for charge in charges:
                tat = gcra.adjusted(
                    tat=tats.get(charge.key), now=now, delta=charge.cost, rate=charge.rate
                )
                if tat is None:
                    conn.execute("DELETE FROM tat WHERE key = ?", (charge.key,))
                else:
                    conn.execute(
                        "INSERT OR REPLACE INTO tat (key, tat) VALUES (?, ?)", (charge.key, tat)
                    )
                tats[charge.key] = tat

    async def aclose(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            conn.close()

    @contextmanager
    def _transaction(self, *, write: bool) -> Iterator[sqlite3.Connection]:
        """One transaction, committed when the block ends, rolled back when it raises; every
        SQLite or file error is `StoreUnavailable`."""
        try:
            conn = self._connection()
            if write:
                self._lock(conn)
            else:
                conn.execute("BEGIN")
        except (sqlite3.Error, OSError) as exc:
            raise StoreUnavailable(f"sqlite {self.path}: {exc}") from exc
        try:
            yield conn
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            conn.execute("ROLLBACK")
            raise StoreUnavailable(f"sqlite {self.path}: {exc}") from exc
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            conn = connect(self.path, busy_ms=self._busy_ms, synchronous="OFF")
            conn.execute(_SCHEMA)
            conn.execute("PRAGMA busy_timeout = 0")  # _lock waits instead
            self._conn = conn
        return self._conn

    def _lock(self, conn: sqlite3.Connection) -> None:
        """`BEGIN IMMEDIATE`, retried every `_RETRY_SECONDS` while another process holds the
        write lock. SQLite's own busy handler sleeps 1 ms at its first retry, on the event loop:
        with two workers checking ~1,000 times a second each it cost a third of their
        throughput (benchmarks/workers.py), when the lock is held for tens of microseconds."""
        deadline = time.monotonic() + self._busy_ms / 1000
        while True:
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() >= deadline:
                    raise
                time.sleep(_RETRY_SECONDS)
            else:
                return


def _read(conn: sqlite3.Connection, charges: Sequence[Charge]) -> dict[str, float | None]:
    keys = list({c.key for c in charges})
    marks = ",".join("?" * len(keys))
    rows = conn.execute(f"SELECT key, tat FROM tat WHERE key IN ({marks})", keys).fetchall()  # noqa: S608
    found: dict[str, float | None] = {key: float(tat) for key, tat in rows}
    return found
