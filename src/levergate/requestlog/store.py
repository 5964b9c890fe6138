"""Where the request log lives: one table, `lg_requests`, in SQLite (one machine, the default)
or PostgreSQL (replicas sharing one log), behind one synchronous class per engine.

Synchronous on purpose: the writer calls `write` from its own thread (requestlog/writer.py), or
SQLite's `writing`, which never waits for a lock, from its event loop, and the readers (`GET
/admin/log`, the CLI, reports) call the rest from a thread of their own or from the CLI's,
each on a store of its own (one connection is used by one thread at a time). Every failure
— a locked or full disk, a dead or restarted server, a corrupt file — becomes `LogStoreError`;
the connection is dropped and opened again at the next call, which is how a restarted
PostgreSQL is reconnected to.

Two indexes, each one a reader cannot do without; each costs the writer instructions a record
(SQLite and the libc under it, callgrind: the store's write less without it, 8 KiB pages,
`benchmarks/log_breakdown.py`: ~1,100 the time's, ~2,900 the request id's):
- `(ts, seq)`: every time range (the dashboard's charts and pages always have one, `since` /
  `until`, `levergate report`), the pages newest first and their cursors (ORDER BY ts DESC,
  seq DESC), and the age bound's prune;
- `request_id`: the lookups with no time to narrow them (the dashboard's record page, a shadow
  label's record in `levergate finetune`, `?request_id=`). The ids levergate makes begin with
  the time (core/ids.py), so this index appends too: with random ids each record landed on a
  random leaf, and on a log of 200k records a record wrote 9.0 KB (WAL frames, checkpoints)
  and read 12.6 KB, against 1.1 KB and 0.5 KB now (`benchmarks/log_store_io.py`).
Tenant, key, model, feature, outcome, latency and cost refine a scan of the time index: a
windowed view reads the window's records, as the unfiltered view of the same window does, and
a page newest first stops at its `limit`-th match. Until 2026-12 the tenant, the key, and the
model asked for and the one that answered each had an index of its own (with time): four more
per record written for filters the time index serves, the model's (`model = ? OR alias = ?`)
needing two; a store that finds them drops them (`DROPPED`). `prune` enforces the bounds:
records past the age first, then the oldest until the table is under the size.
"""

from __future__ import annotations

import contextlib
import sqlite3
from abc import ABC, abstractmethod
from collections.abc import Generator, Sequence
from itertools import chain
from pathlib import Path
from typing import Any, ClassVar, NamedTuple, Protocol

import orjson

from levergate.requestlog.binds import MULTI_ROWS, NO_DEFAULT, Statement, Statements, modes_of
from levergate.requestlog.labels import (
    LABEL_COLUMNS,
    LABEL_NAMES,
    LABELS_TABLE,
    Labelled,
    as_label,
)
from levergate.requestlog.query import Cursor, LogFilter, encode_cursor
from levergate.requestlog.row import COLUMNS, LEVERS, NAMES, ZERO_DEFAULT, as_dict, saved_column
from levergate.stores.sqlite_worker import connect

__all__ = [
    "LogStore",
    "LogStoreBusy",
    "LogStoreError",
    "Page",
    "PostgresLog",
    "SqliteLog",
    "open_store",
]

TABLE = "lg_requests"
# The indexes of older levergates (module docstring), dropped where they are found.
DROPPED = tuple(f"{TABLE}_{c}" for c in ("tenant", "key_id", "model", "alias"))
GROUPS = frozenset({"model", "alias", "tenant", "key_id", "feature", "workflow", "outcome",
                    "upstream", "kind", "cache", "origin", "tier", "priority"})  # fmt: skip
INDEX_ENTRY_BYTES = 40  # a b-tree entry of one indexed column and the time, roughly
_SUMS = ("cost_usd", "saved_usd", "input_tokens", "cached_tokens", "cache_write_tokens",
         "output_tokens", "expected_cached")  # fmt: skip
# A new SQLite log's page size, bytes (a file in WAL mode keeps the size it was made with: an
# older log keeps SQLite's 4 KiB). SQLite writes a WAL frame as two `pwrite`s (its header, its
# page) and a checkpoint copies a page as a `pread` and a `pwrite`, so a page twice as large
# halves the system calls a record: 0.41 -> 0.24 writes a request in-process (`otel_where.py
# --sides off,log`), 0.13 -> 0.06 reads a record on a grown log (`log_store_io.py`), for 7-13%
# more bytes (each commit rewrites the partly filled last page of the table and of each index
# whole); and a b-tree of larger pages splits less: the store's write 19.7-19.9k -> 18.7-19.7k
# instructions a record (`log_breakdown.py`, three runs).
# Under light traffic (small commits) the bytes grow more and the calls fall less (20 rows a
# commit: +53% bytes, -21% calls). 16 KiB: 0.14 writes, but 26% more bytes than 4 KiB and more
# instructions than 8 KiB (benchmarks/results/logsql.md).
PAGE_SIZE = 8192
# The most latency samples `latencies` returns: a range with more records is sampled evenly.
MAX_SAMPLES = 20_000


# sqlite3 binds an int, a float or a str as it is, and passes anything else, None included,
# through its adapter protocol first: the adapter registry, then `PrepareProtocol.__adapt__`
# and `None.__conform__`, each an AttributeError formatted and cleared, ~2,000 instructions a
# None (callgrind). A row has ~10-15 NULL columns: 90k instructions a row inserted, 60k with
# None found in the registry (benchmarks/instructions.py). The adapter is a method in C that
# returns None for None (an empty dict's `get`): a Python function there was a frame per NULL,
# a few hundred instructions more each. The registry is sqlite3's, for the whole process: None
# binds as NULL there as before.
_NULL: dict[None, None] = {}
sqlite3.register_adapter(type(None), _NULL.get)


def _close(conn: Any) -> None:
    """Close a connection, one that failed included (its error is not the caller's)."""
    if conn is not None:
        with contextlib.suppress(Exception):
            conn.close()


class LogStoreError(Exception):
    """The log store could not do what was asked (down, locked, full, corrupt)."""


class LogStoreBusy(LogStoreError):
    """The store cannot write without waiting (`SqliteLog.writing`): write in the thread."""


class Page(NamedTuple):
    records: list[dict[str, Any]]
    next_cursor: str | None


class LogStore(Protocol):
    def write(self, rows: Sequence[tuple[Any, ...]]) -> None: ...
    def page(self, where: LogFilter, *, cursor: Cursor | None, limit: int) -> Page: ...
    def after(self, seq: int, where: LogFilter, *, limit: int) -> list[dict[str, Any]]: ...
    def last_seq(self) -> int: ...
    def summary(self, where: LogFilter) -> dict[str, Any]: ...
    def series(self, where: LogFilter, *, bucket_seconds: float) -> list[dict[str, Any]]: ...
    def groups(self, where: LogFilter, *, by: str, limit: int = 100) -> list[dict[str, Any]]: ...
    def latencies(self, where: LogFilter, *, most: int = MAX_SAMPLES) -> list[tuple[Any, ...]]: ...
    def prune(self, *, now: float, max_age_seconds: float, max_bytes: int) -> int: ...
    def write_labels(self, rows: Sequence[tuple[Any, ...]]) -> None: ...
    def labels(
        self, which: Labelled, *, limit: int, after: tuple[float, int] | None = None
    ) -> list[dict[str, Any]]: ...
    def label_counts(self, which: Labelled) -> list[dict[str, Any]]: ...
    def prune_labels(self, *, now: float, max_age_seconds: float, max_rows: int) -> int: ...
    def close(self) -> None: ...


class _Sql(ABC):
    """The SQL both engines share; each subclass says how to connect, its placeholder, its
    column types and how big the table is."""

    ph = "?"
    seq_type = "INTEGER PRIMARY KEY AUTOINCREMENT"
    types: ClassVar[dict[str, str]] = {}
    floor = "CAST({} AS INTEGER)"
    modulo = "{} % {}"

    def __init__(self) -> None:
        self._conn: Any = None
        self._fits: int | None = None  # records that fitted the size bound at the last prune

    # ---- what each engine says ----------------------------------------------------------------

    @abstractmethod
    def _connect(self) -> Any: ...

    @abstractmethod
    def _errors(self) -> tuple[type[BaseException], ...]: ...

    @abstractmethod
    def _used_bytes(self, count: int) -> int:
        """The table's size with its indexes (`count`: its records now)."""
        ...

    # ---- shared ------------------------------------------------------------------------------

    def schema(self) -> list[str]:
        columns = ", ".join(f"{name} {self.types.get(kind, kind)}"
                            f"{' DEFAULT 0' if name in ZERO_DEFAULT else ''}"
                            for name, kind in COLUMNS)  # fmt: skip
        found = [f"CREATE TABLE IF NOT EXISTS {TABLE} (seq {self.seq_type}, {columns})",
                 f"CREATE INDEX IF NOT EXISTS {TABLE}_ts ON {TABLE} (ts, seq)",
                 f"CREATE INDEX IF NOT EXISTS {TABLE}_request ON {TABLE} (request_id)"]  # fmt: skip
        found += [f"DROP INDEX IF EXISTS {name}" for name in DROPPED]
        labelled = ", ".join(f"{n} {self.types.get(k, k)}" for n, k in LABEL_COLUMNS)
        found += [
            f"CREATE TABLE IF NOT EXISTS {LABELS_TABLE} (seq {self.seq_type}, {labelled})",
            f"CREATE INDEX IF NOT EXISTS {LABELS_TABLE}_name ON {LABELS_TABLE} (name, ts)",
            f"CREATE INDEX IF NOT EXISTS {LABELS_TABLE}_ts ON {LABELS_TABLE} (ts)",
        ]
        return found

    def added(self, present: Sequence[str]) -> list[str]:
        """The statements that bring a table written by an older levergate (`present`: its
        columns) up to `COLUMNS`: each newer column added, NULL in the old rows (whose `schema`
        says which record shape wrote them)."""
        return self._added(present, table=TABLE, columns=COLUMNS)

    def _added(
        self, present: Sequence[str], *, table: str, columns: Sequence[tuple[str, str]]
    ) -> list[str]:
        have = {name.lower() for name in present}
        return [f"ALTER TABLE {table} ADD COLUMN {name} {self.types.get(kind, kind)}"
                for name, kind in columns if name not in have]  # fmt: skip

    def labels_added(self, present: Sequence[str]) -> list[str]:
        """As `added`, for the labels table (`LABEL_COLUMNS`)."""
        return self._added(present, table=LABELS_TABLE, columns=LABEL_COLUMNS)

    def _run(self, sql: str, values: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        found: list[tuple[Any, ...]] = self._with(lambda conn: self._fetch(conn, sql, values))
        return found

    def _fetch(self, conn: Any, sql: str, values: Sequence[Any]) -> list[tuple[Any, ...]]:
        cursor = conn.execute(sql, values)
        return list(cursor.fetchall()) if cursor.description is not None else []

    def _with(self, work: Any) -> Any:
        errors: tuple[type[BaseException], ...] = (*self._errors(), OSError)
        try:
            if self._conn is None:
                self._conn = self._connect()
            return work(self._conn)
        except errors as exc:
            self._drop()
            raise LogStoreError(f"request log: {exc}") from exc

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        _close(conn)

    def close(self) -> None:
        self._drop()

    def write(self, rows: Sequence[tuple[Any, ...]]) -> None:
        """Insert rows (`COLUMNS` order) in one transaction, a few statements in all: a
        statement per row (`executemany`) makes the writer's thread give up the GIL after each
        row and wait for the event loop's thread to hand it back, which cost each side ~100 us
        a request (measured in-process)."""

        def insert(conn: Any) -> None:
            with self._transaction(conn):
                self._insert(conn, rows)

        self._with(insert)

    @abstractmethod
    def _insert(
        self, conn: Any, rows: Sequence[tuple[Any, ...]], *, table: str = TABLE,
        columns: Sequence[tuple[str, str]] = COLUMNS,
    ) -> None: ...  # fmt: skip

    # ---- shadow labels (requestlog/labels.py) --------------------------------------------------

    def write_labels(self, rows: Sequence[tuple[Any, ...]]) -> None:
        """Insert label rows (`LABEL_COLUMNS` order) in one transaction (none: nothing)."""
        if not rows:
            return

        def insert(conn: Any) -> None:
            with self._transaction(conn):
                self._insert(conn, rows, table=LABELS_TABLE, columns=LABEL_COLUMNS)

        self._with(insert)

    def labels(
        self, which: Labelled, *, limit: int, after: tuple[float, int] | None = None
    ) -> list[dict[str, Any]]:
        """The labels `which` wants (compared ones unless it says otherwise), oldest first, at
        most `limit`; `after`: only those after this (ts, seq), a page's last (each row carries
        its `seq`)."""
        condition, values = which.where(self.ph)
        if after is not None:
            ph = self.ph
            condition += f" AND ts >= {ph} AND (ts > {ph} OR (ts = {ph} AND seq > {ph}))"
            values += [after[0], after[0], after[0], after[1]]
        sql = (f"SELECT seq, {', '.join(LABEL_NAMES)} FROM {LABELS_TABLE} WHERE {condition} "
               f"ORDER BY ts, seq LIMIT {int(limit)}")  # fmt: skip
        return [{"seq": row[0], **as_label(row[1:])} for row in self._run(sql, values)]

    def label_counts(self, which: Labelled) -> list[dict[str, Any]]:
        """Per route or cascade, model pair and day (UTC, epoch seconds of its start): labels
        compared, agreeing, and carrying a prompt (only those can train a router)."""
        condition, values = which.where(self.ph)
        day = self.floor.format("ts / 86400.0")
        sql = (f"SELECT layer, name, cheap, strong, {day} AS d, COUNT(*), SUM(CASE WHEN "
               f"result = 'agree' THEN 1 ELSE 0 END), COUNT(prompt) FROM {LABELS_TABLE} "
               f"WHERE {condition} GROUP BY layer, name, cheap, strong, d "
               "ORDER BY name, d, cheap")  # fmt: skip
        return [{"layer": layer, "name": name, "cheap": cheap, "strong": strong,
                 "day": float(d) * 86400, "labels": int(n), "agree": int(a or 0),
                 "with_prompt": int(p or 0)}
                for layer, name, cheap, strong, d, n, a, p in self._run(sql, values)]  # fmt: skip

    def prune_labels(self, *, now: float, max_age_seconds: float, max_rows: int) -> int:
        """Delete labels older than the age, then the oldest past `max_rows`."""
        gone = self._delete(f"DELETE FROM {LABELS_TABLE} WHERE ts < {self.ph}",
                            [now - max_age_seconds])  # fmt: skip
        count = int(self._run(f"SELECT COUNT(*) FROM {LABELS_TABLE}")[0][0])
        if count <= max_rows:
            return gone
        return gone + self._delete(
            f"DELETE FROM {LABELS_TABLE} WHERE seq <= (SELECT seq FROM {LABELS_TABLE} ORDER BY "
            f"seq DESC LIMIT 1 OFFSET {self.ph})", [max_rows],
        )  # fmt: skip

    def _transaction(self, conn: Any) -> Any:
        return conn

    def page(self, where: LogFilter, *, cursor: Cursor | None, limit: int) -> Page:
        condition, values = where.where(self.ph)
        if cursor is not None:
            # `ts <= ?` first: a range the time index searches (the OR alone is not one, and
            # each page of an export scanned from the newest record down to its cursor).
            condition += (f" AND ts <= {self.ph} AND (ts < {self.ph} OR (ts = {self.ph} AND "
                          f"seq < {self.ph}))")  # fmt: skip
            values += [cursor[0], cursor[0], cursor[0], cursor[1]]
        sql = (f"SELECT seq, {', '.join(NAMES)} FROM {TABLE} WHERE {condition} "
               f"ORDER BY ts DESC, seq DESC LIMIT {int(limit) + 1}")  # fmt: skip
        rows = self._run(sql, values)
        more = len(rows) > limit
        rows = rows[:limit]
        records = [_record(row) for row in rows]
        last = rows[-1] if rows else None
        return Page(records, encode_cursor((last[1], last[0])) if more and last else None)

    def after(self, seq: int, where: LogFilter, *, limit: int) -> list[dict[str, Any]]:
        """Records written after `seq` (oldest first): what `levergate log tail` follows."""
        condition, values = where.where(self.ph)
        sql = (f"SELECT seq, {', '.join(NAMES)} FROM {TABLE} WHERE seq > {self.ph} AND "
               f"{condition} ORDER BY seq LIMIT {int(limit)}")  # fmt: skip
        return [_record(row) for row in self._run(sql, [seq, *values])]

    def last_seq(self) -> int:
        rows = self._run(f"SELECT MAX(seq) FROM {TABLE}")
        return int(rows[0][0] or 0) if rows else 0

    def summary(self, where: LogFilter) -> dict[str, Any]:
        condition, values = where.where(self.ph)
        levers = [saved_column(lever) for lever in LEVERS]
        sums = ", ".join(f"SUM({c})" for c in (*_SUMS, *levers))
        sql = (f"SELECT COUNT(*), SUM(CASE WHEN outcome <> 'ok' THEN 1 ELSE 0 END), MIN(ts), "
               f"MAX(ts), {sums} FROM {TABLE} WHERE {condition}")  # fmt: skip
        row = self._run(sql, values)[0]
        found: dict[str, Any] = {"requests": int(row[0] or 0), "errors": int(row[1] or 0),
                                 "first_ts": row[2], "last_ts": row[3]}  # fmt: skip
        for name, value in zip(_SUMS, row[4:], strict=False):
            found[name] = value or 0
        found["savings"] = {str(lever): row[4 + len(_SUMS) + i] or 0.0
                            for i, lever in enumerate(LEVERS)}  # fmt: skip
        return found

    def series(self, where: LogFilter, *, bucket_seconds: float) -> list[dict[str, Any]]:
        """Per time bucket (its start, epoch seconds): requests, errors, cost, net savings and
        the savings of each lever."""
        condition, values = where.where(self.ph)
        bucket = self.floor.format(f"ts / {float(bucket_seconds)!r}")
        levers = ", ".join(f"SUM({saved_column(lever)})" for lever in LEVERS)
        sql = (f"SELECT {bucket} AS b, COUNT(*), SUM(CASE WHEN outcome <> 'ok' THEN 1 ELSE 0 "
               f"END), SUM(cost_usd), SUM(saved_usd), {levers} FROM {TABLE} WHERE {condition} "
               f"GROUP BY b ORDER BY b")  # fmt: skip
        return [{"ts": float(b) * bucket_seconds, "requests": int(n), "errors": int(e or 0),
                 "cost_usd": c or 0.0, "saved_usd": s or 0.0,
                 "savings": {str(lever): v or 0.0 for lever, v in zip(LEVERS, rest, strict=True)}}
                for b, n, e, c, s, *rest in self._run(sql, values)]  # fmt: skip

    def latencies(self, where: LogFilter, *, most: int = MAX_SAMPLES) -> list[tuple[Any, ...]]:
        """(ts, total_ms, ttft_ms) of the matching records, oldest first: all of them up to
        `most`, else every k-th by sequence number (an even sample across the range, so a
        percentile over a week is not a percentile over its last hour)."""
        condition, values = where.where(self.ph)
        count = int(self._run(f"SELECT COUNT(*) FROM {TABLE} WHERE {condition}", values)[0][0])
        every = max(1, -(-count // max(1, most)))
        sample = f" AND {self.modulo.format('seq', every)} = 0" if every > 1 else ""
        sql = (f"SELECT ts, total_ms, ttft_ms FROM {TABLE} WHERE {condition}{sample} "
               f"ORDER BY ts LIMIT {int(most)}")  # fmt: skip
        return self._run(sql, values)

    def groups(self, where: LogFilter, *, by: str, limit: int = 100) -> list[dict[str, Any]]:
        """Per value of `by` (one of `GROUPS`): requests, errors, cost, savings, mean latency."""
        if by not in GROUPS:
            raise ValueError(f"cannot group by {by!r}")
        condition, values = where.where(self.ph)
        sql = (f"SELECT {by}, COUNT(*), SUM(CASE WHEN outcome <> 'ok' THEN 1 ELSE 0 END), "
               f"SUM(cost_usd), SUM(saved_usd), AVG(total_ms) FROM {TABLE} WHERE {condition} "
               f"GROUP BY {by} ORDER BY COUNT(*) DESC LIMIT {int(limit)}")  # fmt: skip
        return [{by: g, "requests": int(n), "errors": int(e or 0), "cost_usd": c or 0.0,
                 "saved_usd": s or 0.0, "mean_total_ms": m}
                for g, n, e, c, s, m in self._run(sql, values)]  # fmt: skip

    def prune(self, *, now: float, max_age_seconds: float, max_bytes: int) -> int:
        """Delete what is past the bounds; how many records went.

        Deleting the oldest records frees whole pages of the table and of the time-ordered
        indexes, but only leaves room inside the pages of an index in another order (the
        request id, of the ids clients sent and of those levergate drew at random before
        2026-12), which new records fill again; so right after a prune the size reads
        nearly what it did. The count that fitted is kept, and the size is measured again only
        once the log holds more records than that (by then the room is taken again)."""
        gone = self._delete(f"DELETE FROM {TABLE} WHERE ts < {self.ph}", [now - max_age_seconds])
        count = self.last_count()
        if self._fits is not None and count <= self._fits:
            return gone
        used = self._with(lambda _conn: self._used_bytes(count))
        if used <= max_bytes:
            self._fits = None
            return gone
        # Keep the newest records in proportion, 10% under the bound so it is not met again
        # at the next batch.
        keep = int(count * max_bytes * 0.9 / used)
        gone += self._delete(
            f"DELETE FROM {TABLE} WHERE seq <= (SELECT seq FROM {TABLE} ORDER BY seq DESC "
            f"LIMIT 1 OFFSET {self.ph})", [keep],
        )  # fmt: skip
        self._fits = keep
        return gone

    def last_count(self) -> int:
        return int(self._run(f"SELECT COUNT(*) FROM {TABLE}")[0][0])

    def _delete(self, sql: str, values: Sequence[Any]) -> int:
        def run(conn: Any) -> int:
            with self._transaction(conn):
                return int(conn.execute(sql, values).rowcount or 0)

        return int(self._with(run))


def _record(row: Sequence[Any]) -> dict[str, Any]:
    return {"seq": row[0], **as_dict(row[1:])}


class SqliteLog(_Sql):
    """A batch's INSERT leaves out the columns at their default, NULL or 0 (`ZERO_DEFAULT`), in
    every row of the batch, and binds the columns of one value once (requestlog/binds.py):
    each value bound costs sqlite3 and SQLite's VDBE a few hundred instructions, a NULL
    through the adapter registry more (`_NULL`), and a record has ~25 columns at their default
    (the savings of levers that did nothing, no bodies, no retry). Decided per column over the
    whole batch (a C `count` a column), not per row: a per-row mask (`map(ne, row, defaults)`)
    cost more than the binds it spared (callgrind: 56.8k against 53.7k instructions a row),
    and grouping rows by mask broke the batch's order (`seq`, which the size bound prunes
    by)."""

    def __init__(self, path: str, *, timeout_seconds: float, batch_size: int = 0) -> None:
        """`batch_size`: the rows of the writer's full batch (`request_log.batch_size`), written
        as one statement of that size (0: none)."""
        super().__init__()
        self.path = path
        self._whole = batch_size
        self._busy_ms = max(1, int(timeout_seconds * 1000))
        self._defaults: tuple[object, ...] = ()  # each column's default, `COLUMNS` order
        self._manual = False  # the connection's automatic checkpoints off (`writing`)
        self._checkpointer: sqlite3.Connection | None = None  # `checkpoint`'s connection
        # The (device, inode) of the file each connection opened (`_moved`).
        self._file: tuple[int, int] | None = None
        self._checkpointed_file: tuple[int, int] | None = None
        # SQLite's least bound on parameters (999, before 3.32) until connected.
        self._statements = Statements(TABLE, NAMES, limit=999)

    def _connect(self) -> sqlite3.Connection:
        # made in the writer's thread and written on its event loop too (`writing`)
        conn = connect(self.path, busy_ms=self._busy_ms, any_thread=True, page_size=PAGE_SIZE)
        self._file = _identity(self.path)
        self._manual = False  # SQLite's automatic checkpoints on (`writing` turns them off)
        for statement in self.schema():
            conn.execute(statement)
        present = [row[1] for row in conn.execute(f"PRAGMA table_info({TABLE})")]
        labelled = [row[1] for row in conn.execute(f"PRAGMA table_info({LABELS_TABLE})")]
        for statement in (*self.added(present), *self.labels_added(labelled)):
            conn.execute(statement)
        # A table made before `ZERO_DEFAULT` (or a column added since) has NULL defaults: a 0
        # is bound there, never left out.
        found = {row[1]: row[4] for row in conn.execute(f"PRAGMA table_info({TABLE})")}
        self._defaults = (NO_DEFAULT, *(  # `ts` always bound: no row is all defaults
            None if found[name] is None else 0 if found[name] == "0" else NO_DEFAULT
            for name in NAMES[1:]
        ))  # fmt: skip
        limit = conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
        self._statements = Statements(TABLE, NAMES, limit=limit)  # compiled anew here
        return conn

    def _errors(self) -> tuple[type[BaseException], ...]:
        return (sqlite3.Error,)

    def _with(self, work: Any) -> Any:
        """As every engine's, but first `_moved`."""
        self._moved()
        return super()._with(work)

    def _moved(self) -> None:
        """Is the file connected to still at `path`? Deleted or replaced (an operator freeing
        the disk, logrotate), an open connection writes on into the unlinked file, every record
        counted as written and none readable, all gone at the next start. Then the call fails
        (the writer keeps its batch and retries; a reader's is a 503) and the next connects
        anew, making the file again. A `stat` a call (a batch, on the loop or in the thread, a
        prune or a read), never a record; the checkpoints' connection is let go by its own
        thread (`checkpoint`)."""
        if self._conn is not None and _identity(self.path) != self._file:
            self._drop()
            raise LogStoreError(f"request log: {self.path} was deleted or replaced: made anew "
                                "at the next call")  # fmt: skip

    def _transaction(self, conn: Any) -> Any:
        return _SqliteTransaction(conn)

    def write(self, rows: Sequence[tuple[Any, ...]]) -> None:
        """A full batch (`batch_size` rows) in one statement, which is its own transaction;
        another in a few multi-row statements in one transaction. Each statement makes the
        writer's thread give the GIL up and wait for the event loop's thread to hand it back,
        a thread hand-off each while the loop is busy (`log_handoffs.py`): CPython 3.11's
        sqlite3 releases it 5 times an `execute` (around the step, two resets, the column
        count, the last row id) and 4 an `executemany` of one set of values (no row id read),
        which is how the inserts run. A statement per row cost each side ~100 us a request; a
        full batch of 500 in six statements and BEGIN/COMMIT, up to ~1.3 context switches a
        request in-process. Each column is left out, bound once or bound in every row
        (requestlog/binds.py)."""

        def insert(conn: sqlite3.Connection) -> None:
            statement, once, values = self._prepared(rows)
            sizes = chunk_sizes(len(rows), statement.most, whole=self._whole)
            if len(sizes) > 1 and not conn.in_transaction:
                with self._transaction(conn):
                    self._execute(conn, statement, sizes, once, values)
            else:
                self._execute(conn, statement, sizes, once, values)

        if rows:
            self._with(insert)

    def writing(self, rows: Sequence[tuple[Any, ...]], *, at_once: int) -> Generator[None]:
        """Insert `rows` on the caller's thread (the writer's event loop), in one transaction
        of statements of `at_once` rows (the rest in powers of two), yielding after each so
        that the caller lets other work run between them. It never waits: SQLite's busy
        timeout is 0 meanwhile, so a database another process holds locked raises
        `LogStoreBusy` at BEGIN, as does a store not connected yet (connecting runs the schema,
        which may wait): the caller writes through `write`, in its thread, then. And it never
        syncs the disk: in WAL mode with `synchronous = NORMAL` a commit appends to the WAL
        and only a checkpoint syncs, so this connection's automatic checkpoints are off from
        its first such write and the caller runs `checkpoint` in its thread instead. Closed
        before its end (the caller cancelled), the transaction is rolled back. Any other
        failure: `LogStoreError`, the connection dropped, as `write`'s."""
        conn = self._conn
        if conn is None:
            raise LogStoreBusy("request log: not connected yet")
        self._moved()
        done = False
        try:
            statement, once, values = self._prepared(rows)
            width = statement.width
            self._begin_now(conn)
            at = 0
            for size in chunk_sizes(len(rows), statement.most, whole=at_once):
                conn.executemany(statement.text(size), [once + values[at : at + size * width]])
                at += size * width
                yield
            conn.execute("COMMIT")
            done = True
        except (sqlite3.Error, OSError) as exc:
            self._drop()
            raise LogStoreError(f"request log: {exc}") from exc
        finally:
            if self._conn is conn:
                with contextlib.suppress(sqlite3.Error):
                    if not done and conn.in_transaction:
                        conn.execute("ROLLBACK")
                    conn.execute(f"PRAGMA busy_timeout = {self._busy_ms}")

    def _begin_now(self, conn: sqlite3.Connection) -> None:
        conn.execute("PRAGMA busy_timeout = 0")
        if not self._manual:
            conn.execute("PRAGMA wal_autocheckpoint = 0")
            self._manual = True
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode != sqlite3.SQLITE_BUSY:
                raise
            raise LogStoreBusy(f"request log: {exc}") from None

    def checkpoint(self) -> None:
        """Copy the WAL's committed pages into the database file and sync it (PASSIVE: never
        waiting for a reader or a writer), for a writer whose `writing` turned SQLite's own
        checkpoints off; a no-op when not connected. On a connection of its own, so that the
        writer can run it in a thread of its own while its connection writes (in WAL mode a
        checkpoint and a writer run at once); one thread at a time calls it."""
        if self._conn is None:
            return
        if self._checkpointer is not None and _identity(self.path) != self._checkpointed_file:
            self._close_checkpointer()  # the file it opened is gone (`_moved`)
        try:
            if self._checkpointer is None:
                self._checkpointer = connect(self.path, busy_ms=self._busy_ms, any_thread=True)
                self._checkpointed_file = _identity(self.path)
            self._checkpointer.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except (sqlite3.Error, OSError) as exc:
            self._close_checkpointer()
            raise LogStoreError(f"request log: {exc}") from exc

    def _close_checkpointer(self) -> None:
        conn, self._checkpointer = self._checkpointer, None
        _close(conn)

    def close(self) -> None:
        self._close_checkpointer()
        super().close()

    def _prepared(self, rows: Sequence[tuple[Any, ...]]) -> tuple[Statement, list[Any], list[Any]]:
        """The statement for `rows` (its columns left out, bound once or in every row:
        binds.py) and its values, those bound once and the rest flattened."""
        if set(map(len, rows)) != {len(NAMES)}:  # in C
            raise sqlite3.ProgrammingError(f"rows of {len(NAMES)} values expected")
        columns = list(zip(*rows, strict=True))
        statement = self._statements.choose(modes_of(columns, self._defaults))
        once, values = statement.values(columns)
        return statement, once, values

    @staticmethod
    def _execute(
        conn: sqlite3.Connection, statement: Statement, sizes: Sequence[int], once: list[Any],
        values: list[Any],
    ) -> None:  # fmt: skip
        width = statement.width
        at = 0
        for size in sizes:
            # `executemany` of one set of values: sqlite3 then does not read the last row's id,
            # one of the GIL's releases an `execute` makes (4 instead of 5, callgrind)
            conn.executemany(statement.text(size), [once + values[at : at + size * width]])
            at += size * width

    def _insert(
        self, conn: Any, rows: Sequence[tuple[Any, ...]], *, table: str = TABLE,
        columns: Sequence[tuple[str, str]] = COLUMNS,
    ) -> None:  # fmt: skip
        head, row, most = _insert_texts(conn, table, [name for name, _ in columns])
        self._insert_values(conn, head, row, chunk_sizes(len(rows), most, whole=self._whole),
                            list(chain.from_iterable(rows)))  # fmt: skip

    def _insert_values(
        self, conn: sqlite3.Connection, head: str, row: str, sizes: Sequence[int],
        values: list[Any],
    ) -> None:  # fmt: skip
        """`values` (rows of `row`'s width, flattened) in statements of `sizes` rows, in one
        transaction when there are several."""
        if len(sizes) > 1 and not conn.in_transaction:
            with self._transaction(conn):
                self._insert_values(conn, head, row, sizes, values)
            return
        width = row.count("?")
        at = 0
        for size in sizes:
            conn.executemany(head + ", ".join([row] * size), [values[at : at + size * width]])
            at += size * width

    def _used_bytes(self, count: int) -> int:
        del count  # exact here: the pages in use
        conn = self._conn
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        free = conn.execute("PRAGMA freelist_count").fetchone()[0]
        size = conn.execute("PRAGMA page_size").fetchone()[0]
        return int((pages - free) * size)


def _identity(path: str) -> tuple[int, int] | None:
    """The file at `path` (device, inode), None when there is none."""
    try:
        found = Path(path).stat()
    except OSError:
        return None
    return found.st_dev, found.st_ino


def chunk_sizes(count: int, most: int, *, whole: int = 0) -> list[int]:
    """`count` rows as statements of `whole` rows (a full batch; when 0 or above `most`, of
    `most` rows), the rest in powers of two (499: 256, 128, 64, 32, 16, 2, 1): a statement's
    text is compiled once and kept (sqlite3's statement cache) only if it comes back; one of
    any size compiled anew cost ~20 us a row (measured: 42 against 22 us a row for 499 rows;
    ~6 us since a statement's later rows name plain parameters, binds.py `Statement.text`),
    and sizes vary with the traffic."""
    step = whole if 0 < whole <= most else most
    sizes = [step] * (count // step)
    rest = count % step
    while rest:
        size = 1 << (rest.bit_length() - 1)
        sizes.append(size)
        rest -= size
    return sizes


def _insert_texts(
    conn: sqlite3.Connection, table: str, names: Sequence[str]
) -> tuple[str, str, int]:
    """An INSERT's head into `table` naming `names`, one row's placeholders, and the most rows
    a statement takes (within SQLite's bound on parameters)."""
    limit = conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
    return (f"INSERT INTO {table} ({', '.join(names)}) VALUES ",
            "(" + ", ".join(["?"] * len(names)) + ")",
            max(1, min(MULTI_ROWS, limit // len(names))))  # fmt: skip


class _SqliteTransaction:
    """BEGIN IMMEDIATE ... COMMIT (the connection is in autocommit mode: `isolation_level`
    None), rolled back on an error unless SQLite already did."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def __enter__(self) -> None:
        self._conn.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind: object, *_: object) -> None:
        if kind is None:
            self._conn.execute("COMMIT")
        elif self._conn.in_transaction:  # SQLite rolls back by itself on some errors (full)
            self._conn.execute("ROLLBACK")


class PostgresLog(_Sql):
    """psycopg 3, synchronous, one connection; a dead server is noticed within the keepalive
    and `tcp_user_timeout` bounds (a hung one too), a slow one by `statement_timeout`."""

    ph = "%s"
    seq_type = "BIGSERIAL PRIMARY KEY"
    types: ClassVar[dict[str, str]] = {"REAL": "DOUBLE PRECISION", "INTEGER": "BIGINT"}
    floor = "FLOOR({})"
    modulo = "MOD({}, {})"  # '%' is psycopg's placeholder sign

    def __init__(self, dsn: str, *, timeout_seconds: float) -> None:
        super().__init__()
        self._dsn = dsn
        self._timeout = timeout_seconds

    def _connect(self) -> Any:
        import psycopg

        ms = int(self._timeout * 1000)
        conn = psycopg.connect(
            self._dsn, autocommit=True, connect_timeout=max(1, int(self._timeout)),
            options=f"-c statement_timeout={ms} -c lock_timeout={ms}", keepalives=1,
            keepalives_idle=5, keepalives_interval=2, keepalives_count=3, tcp_user_timeout=ms,
        )  # fmt: skip
        try:
            with conn.transaction():
                for statement in self.schema():
                    conn.execute(statement)
                for table, added in ((TABLE, self.added), (LABELS_TABLE, self.labels_added)):
                    present = conn.execute(
                        "SELECT column_name FROM information_schema.columns WHERE table_name = "
                        "%s AND table_schema = current_schema()", (table,),
                    ).fetchall()  # fmt: skip
                    for statement in added([row[0] for row in present]):
                        conn.execute(statement)
        except BaseException:
            conn.close()
            raise
        return conn

    def _errors(self) -> tuple[type[BaseException], ...]:
        import psycopg

        return (psycopg.Error,)

    def _transaction(self, conn: Any) -> Any:
        return conn.transaction()

    def _insert(
        self, conn: Any, rows: Sequence[tuple[Any, ...]], *, table: str = TABLE,
        columns: Sequence[tuple[str, str]] = COLUMNS,
    ) -> None:  # fmt: skip
        """One statement: the rows as one JSON array the server takes apart."""
        casts = {"REAL": "float8", "INTEGER": "bigint", "TEXT": "text"}
        fields = ", ".join(f"(r ->> {i})::{casts[kind]}" for i, (_, kind) in enumerate(columns))
        names = ", ".join(name for name, _ in columns)
        sql = (f"INSERT INTO {table} ({names}) SELECT {fields} "
               "FROM jsonb_array_elements(%s::jsonb) r")  # fmt: skip
        conn.execute(sql, (orjson.dumps(rows).decode(),))

    def _used_bytes(self, count: int) -> int:
        """Estimated: the newest records' mean width plus an index entry per index, times
        the count (the relation's own size keeps deleted rows' space until a vacuum, so after
        a prune it would read the same and prune again)."""
        row = self._conn.execute(
            f"SELECT AVG(pg_column_size(t.*)) FROM (SELECT * FROM {TABLE} ORDER BY seq DESC "
            "LIMIT 1000) t"
        ).fetchone()
        indexes = sum(f" ON {TABLE} (" in statement for statement in self.schema())
        return int(count * (float(row[0] or 0) + INDEX_ENTRY_BYTES * indexes))


def open_store(
    backend: str, address: str, *, timeout_seconds: float, batch_size: int = 0
) -> LogStore:
    """The store `backend` names (`sqlite`: a file; `postgres`: a DSN); nothing connects yet.
    `batch_size`: the writer's full batch (SQLite writes one as one statement)."""
    if backend == "postgres":
        return PostgresLog(address, timeout_seconds=timeout_seconds)
    return SqliteLog(address, timeout_seconds=timeout_seconds, batch_size=batch_size)
