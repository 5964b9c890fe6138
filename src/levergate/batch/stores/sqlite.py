"""The job store in one SQLite file: one gateway process (restart resumes its work).

Every statement runs on the `SqliteWorker` thread, so each method is one atomic unit of work
on one connection; claims run in `BEGIN IMMEDIATE` so a second process opened on the same file
by mistake still never claims a line twice. The lease logic is the PostgreSQL store's: a
restarted gateway is a new holder, and gets the old one's lines when their leases lapse.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Collection, Sequence
from pathlib import Path

from levergate.batch.model import (
    OPEN_NOT,
    Claim,
    Counts,
    FileRecord,
    Job,
    LineRow,
    Usage,
    not_after_of,
)
from levergate.batch.store import StoreError
from levergate.core.json_bound import parse_json
from levergate.stores.sqlite_worker import SqliteWorker, connect

SCHEMA = """
CREATE TABLE IF NOT EXISTS files (
  seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE NOT NULL, tenant TEXT NOT NULL,
  filename TEXT NOT NULL, purpose TEXT NOT NULL, bytes INTEGER NOT NULL,
  created_at INTEGER NOT NULL, lines INTEGER NOT NULL, expires_at INTEGER);
CREATE TABLE IF NOT EXISTS jobs (
  seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE NOT NULL, tenant TEXT NOT NULL,
  kind TEXT NOT NULL, status TEXT NOT NULL, created_at INTEGER NOT NULL,
  expires_at INTEGER NOT NULL, holder TEXT, lease_until REAL, data BLOB NOT NULL,
  attempts INTEGER NOT NULL DEFAULT 0, bytes INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS lines (
  job_id TEXT NOT NULL, idx INTEGER NOT NULL, custom_id TEXT NOT NULL, request BLOB,
  state TEXT NOT NULL, holder TEXT, lease_until REAL, attempts INTEGER NOT NULL DEFAULT 0,
  result BLOB, PRIMARY KEY (job_id, idx));
CREATE INDEX IF NOT EXISTS lines_pending ON lines (job_id, idx) WHERE state = 'pending';
CREATE INDEX IF NOT EXISTS lines_holder ON lines (holder) WHERE state = 'pending';
CREATE INDEX IF NOT EXISTS jobs_status ON jobs (status, seq);
"""
# Columns added since the first release, added to a file made before them.
ADDED = (
    ("files", "expires_at", "INTEGER"),
    ("jobs", "attempts", "INTEGER NOT NULL DEFAULT 0"),
    ("jobs", "bytes", "INTEGER NOT NULL DEFAULT 0"),
)
# Indexes over those columns: made once they exist.
INDEXES = f"""
CREATE INDEX IF NOT EXISTS files_tenant ON files (tenant);
CREATE INDEX IF NOT EXISTS files_expiry ON files (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS jobs_open ON jobs (tenant, kind) WHERE status NOT IN {OPEN_NOT};
"""
JOB_COLUMNS = "id, tenant, status, kind, created_at, expires_at, data, bytes"
FILE_COLUMNS = "id, tenant, filename, purpose, bytes, created_at, lines, expires_at"
# Jobs whose next step is the runner's: validate, cancel, finalize, or an in_progress job whose
# lines are all done or whose window has passed.
NEEDS_WORK = """
  status IN ('validating', 'cancelling', 'finalizing')
  OR (status = 'in_progress' AND (expires_at < ? OR NOT EXISTS (
      SELECT 1 FROM lines l WHERE l.job_id = jobs.id AND l.state = 'pending')))
"""


class _Worker(SqliteWorker):
    def _open(self) -> sqlite3.Connection:
        # synchronous=FULL: a finished line survives power loss, not only a killed process.
        conn = connect(self.path, busy_ms=self._busy_ms, synchronous="FULL")
        conn.executescript(SCHEMA)
        for table, column, declared in ADDED:
            if column not in {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}:
                try:
                    conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declared}")
                except sqlite3.OperationalError as exc:  # another process added it first
                    if "duplicate column" not in str(exc):
                        raise
        conn.executescript(INDEXES)
        return conn


def _job(row: sqlite3.Row | tuple[object, ...], *, attempts: int = 0) -> Job:
    id_, tenant, status, kind, created, expires, data, size = row
    return Job.from_row(
        id=str(id_), tenant=str(tenant), status=str(status), kind=str(kind),
        created_at=int(created), expires_at=int(expires), data=data,  # type: ignore[arg-type]
        attempts=attempts, holds=int(size),  # type: ignore[arg-type]
    )  # fmt: skip


def _file(row: tuple[object, ...]) -> FileRecord:
    id_, tenant, filename, purpose, size, created, lines, expires = row
    return FileRecord(str(id_), str(tenant), str(filename), str(purpose), int(size),  # type: ignore[call-overload]
                      int(created), int(lines),  # type: ignore[call-overload]
                      None if expires is None else int(expires))  # type: ignore[call-overload]  # fmt: skip


class SqliteStore:
    def __init__(self, path: str | Path, *, timeout: float) -> None:
        self._db = _Worker(path, busy_timeout=timeout, schema="", error=StoreError)

    async def aclose(self) -> None:
        await self._db.aclose()

    # ---- files ----------------------------------------------------------------------------

    async def add_file(self, record: FileRecord) -> None:
        r = record
        await self._db.run(lambda c: c.execute(
            f"INSERT OR IGNORE INTO files ({FILE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (r.id, r.tenant, r.filename, r.purpose, r.bytes, r.created_at, r.lines,
             r.expires_at)))  # fmt: skip

    async def get_file(self, file_id: str, *, tenant: str | None) -> FileRecord | None:
        def work(c: sqlite3.Connection) -> FileRecord | None:
            row = c.execute(f"SELECT {FILE_COLUMNS} FROM files WHERE id = ?", (file_id,)).fetchone()
            return None if row is None or tenant not in (None, row[1]) else _file(row)

        return await self._db.run(work)

    async def list_files(
        self, *, tenant: str, purpose: str | None, after: str | None, limit: int
    ) -> list[FileRecord]:
        sql = f"SELECT {FILE_COLUMNS} FROM files WHERE tenant = ? AND (? IS NULL OR purpose = ?)"
        args: list[object] = [tenant, purpose, purpose]
        if after is not None:
            sql += " AND seq < COALESCE((SELECT seq FROM files WHERE id = ?), -1)"
            args.append(after)
        sql += " ORDER BY seq DESC LIMIT ?"
        args.append(limit)
        return await self._db.run(lambda c: [_file(r) for r in c.execute(sql, args)])

    async def delete_file(self, file_id: str, *, tenant: str) -> bool:
        def work(c: sqlite3.Connection) -> bool:
            done = c.execute("DELETE FROM files WHERE id = ? AND tenant = ?", (file_id, tenant))
            return done.rowcount > 0

        return await self._db.run(work)

    async def expired_files(self, *, now: float, limit: int) -> list[FileRecord]:
        return await self._db.run(lambda c: [_file(r) for r in c.execute(
            f"SELECT {FILE_COLUMNS} FROM files WHERE expires_at IS NOT NULL AND expires_at <= ? "
            "ORDER BY expires_at LIMIT ?", (now, limit))])  # fmt: skip

    async def usage(self, *, tenant: str) -> Usage:
        def work(c: sqlite3.Connection) -> Usage:
            files, size = c.execute("SELECT COUNT(*), COALESCE(SUM(bytes), 0) FROM files "
                                    "WHERE tenant = ?", (tenant,)).fetchone()  # fmt: skip
            open_jobs: dict[str, int] = {}
            for kind, count, held in c.execute(
                "SELECT kind, COUNT(*), COALESCE(SUM(bytes), 0) FROM jobs WHERE tenant = ? "
                f"AND status NOT IN {OPEN_NOT} GROUP BY kind",
                (tenant,),
            ):
                open_jobs[str(kind)] = int(count)
                size += int(held)
            return Usage(int(files), int(size), open_jobs)

        return await self._db.run(work)

    # ---- jobs -----------------------------------------------------------------------------

    async def add_job(self, job: Job) -> None:
        j = job
        await self._db.run(lambda c: c.execute(
            f"INSERT INTO jobs ({JOB_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (j.id, j.tenant, j.status, j.kind, j.created_at, j.expires_at, j.data(),
             j.holds)))  # fmt: skip

    async def get_job(self, job_id: str, *, tenant: str | None) -> Job | None:
        def work(c: sqlite3.Connection) -> Job | None:
            row = c.execute(f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?", (job_id,)).fetchone()
            return None if row is None or tenant not in (None, row[1]) else _job(row)

        return await self._db.run(work)

    async def list_jobs(self, *, tenant: str, after: str | None, limit: int) -> list[Job]:
        sql = f"SELECT {JOB_COLUMNS} FROM jobs WHERE tenant = ? AND kind = 'batch'"
        args: list[object] = [tenant]
        if after is not None:
            sql += " AND seq < COALESCE((SELECT seq FROM jobs WHERE id = ?), -1)"
            args.append(after)
        sql += " ORDER BY seq DESC LIMIT ?"
        args.append(limit)
        return await self._db.run(lambda c: [_job(r) for r in c.execute(sql, args)])

    async def save(self, job: Job, *, expect: str) -> bool:
        def work(c: sqlite3.Connection) -> bool:
            done = c.execute(
                "UPDATE jobs SET status = ?, data = ? WHERE id = ? AND status = ?",
                (job.status, job.data(), job.id, expect),
            )
            return done.rowcount > 0

        return await self._db.run(work)

    async def lease(
        self, *, holder: str, now: float, until: float, avoid: Collection[str] = ()
    ) -> Job | None:
        marks = ", ".join("?" * len(avoid))
        # The tenants in `avoid` (those this process is busy with) go last: another tenant's job
        # is not kept waiting behind a tenant's many (batch/runner.py).
        order = f"(tenant IN ({marks})), seq" if avoid else "seq"

        def work(c: sqlite3.Connection) -> Job | None:
            c.execute("BEGIN IMMEDIATE")
            try:
                row = c.execute(
                    f"SELECT {JOB_COLUMNS}, attempts FROM jobs WHERE (lease_until IS NULL OR "
                    f"lease_until < ?) AND ({NEEDS_WORK}) ORDER BY {order} LIMIT 1",
                    (now, now, *avoid),
                ).fetchone()
                if row is not None:
                    c.execute("UPDATE jobs SET holder = ?, lease_until = ?, "
                              "attempts = attempts + 1 WHERE id = ?",
                              (holder, until, row[0]))  # fmt: skip
                c.execute("COMMIT")
            except BaseException:
                c.execute("ROLLBACK")
                raise
            return None if row is None else _job(row[:-1], attempts=int(row[-1]) + 1)

        return await self._db.run(work)

    async def release(self, job_id: str, *, holder: str, settled: bool = True) -> None:
        await self._db.run(lambda c: c.execute(
            "UPDATE jobs SET holder = NULL, lease_until = NULL, attempts = CASE WHEN ? THEN 0 "
            "ELSE attempts END WHERE id = ? AND holder = ?",
            (settled, job_id, holder)))  # fmt: skip

    # ---- lines ----------------------------------------------------------------------------

    async def clear_lines(self, job_id: str) -> None:
        await self._db.run(lambda c: c.execute("DELETE FROM lines WHERE job_id = ?", (job_id,)))

    async def add_lines(self, job_id: str, rows: Sequence[LineRow]) -> None:
        values = [
            (job_id, r.idx, r.custom_id, r.request,
             "pending" if r.request is not None else "error", r.result)
            for r in rows
        ]  # fmt: skip

        def work(c: sqlite3.Connection) -> None:
            c.execute("BEGIN")
            c.executemany(
                "INSERT OR REPLACE INTO lines (job_id, idx, custom_id, request, state, result) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                values,
            )
            c.execute("COMMIT")

        await self._db.run(work)

    async def claimable(self, *, now: float) -> list[str]:
        """Tenants with a line to claim, the one with the oldest such job first."""
        return await self._db.run(lambda c: [str(r[0]) for r in c.execute(
            "SELECT j.tenant FROM jobs j WHERE j.status = 'in_progress' AND EXISTS (SELECT 1 "
            "FROM lines l WHERE l.job_id = j.id AND l.state = 'pending' AND (l.lease_until IS "
            "NULL OR l.lease_until < ?)) GROUP BY j.tenant ORDER BY MIN(j.seq)",
            (now,))])  # fmt: skip

    async def claim(
        self, *, holder: str, now: float, until: float, limit: int, tenant: str | None = None
    ) -> list[Claim]:
        def work(c: sqlite3.Connection) -> list[Claim]:
            c.execute("BEGIN IMMEDIATE")
            try:
                rows = c.execute(
                    "SELECT l.job_id, l.idx, l.custom_id, l.request, l.attempts, j.tenant, j.data "
                    "FROM jobs j JOIN lines l ON l.job_id = j.id WHERE j.status = 'in_progress' "
                    "AND (? IS NULL OR j.tenant = ?) AND l.state = 'pending' "
                    "AND (l.lease_until IS NULL OR l.lease_until < ?) "
                    "ORDER BY j.seq, l.idx LIMIT ?",
                    (tenant, tenant, now, limit),
                ).fetchall()
                c.executemany(
                    "UPDATE lines SET holder = ?, lease_until = ?, attempts = attempts + 1 "
                    "WHERE job_id = ? AND idx = ?",
                    [(holder, until, r[0], r[1]) for r in rows],
                )
                c.execute("COMMIT")
            except BaseException:
                c.execute("ROLLBACK")
                raise
            return [_claim(r) for r in rows]

        return await self._db.run(work)

    async def renew(self, *, holder: str, until: float) -> int:
        def work(c: sqlite3.Connection) -> int:
            c.execute("UPDATE jobs SET lease_until = ? WHERE holder = ?", (until, holder))
            done = c.execute(
                "UPDATE lines SET lease_until = ? WHERE holder = ? AND state = 'pending'",
                (until, holder),
            )
            return done.rowcount

        return await self._db.run(work)

    async def retry_later(self, job_id: str, idx: int, *, holder: str, at: float) -> None:
        await self._db.run(lambda c: c.execute(
            "UPDATE lines SET holder = NULL, lease_until = ? WHERE job_id = ? AND idx = ? "
            "AND holder = ? AND state = 'pending'", (at, job_id, idx, holder)))  # fmt: skip

    async def finish(self, job_id: str, results: Sequence[tuple[int, bool, bytes]]) -> int:
        def work(c: sqlite3.Connection) -> int:
            written = 0
            c.execute("BEGIN")
            for idx, ok, result in results:
                done = c.execute(
                    "UPDATE lines SET state = ?, result = ?, holder = NULL, request = NULL "
                    "WHERE job_id = ? AND idx = ? AND state = 'pending'",
                    ("ok" if ok else "error", result, job_id, idx),
                )
                written += done.rowcount
            c.execute("COMMIT")
            return written

        return await self._db.run(work)

    async def unleased(self, job_id: str, *, now: float, limit: int) -> list[tuple[int, str]]:
        return await self._db.run(lambda c: [(int(r[0]), str(r[1])) for r in c.execute(
            "SELECT idx, custom_id FROM lines WHERE job_id = ? AND state = 'pending' AND "
            "(lease_until IS NULL OR lease_until < ? OR holder IS NULL) ORDER BY idx LIMIT ?",
            (job_id, now, limit))])  # fmt: skip

    async def counts(self, job_id: str) -> Counts:
        def work(c: sqlite3.Connection) -> Counts:
            found = dict(c.execute(
                "SELECT state, COUNT(*) FROM lines WHERE job_id = ? GROUP BY state", (job_id,)
            ).fetchall())  # fmt: skip
            ok, failed = found.get("ok", 0), found.get("error", 0)
            return Counts(total=ok + failed + found.get("pending", 0), ok=ok, failed=failed)

        return await self._db.run(work)

    async def results(
        self, job_id: str, *, ok: bool, after: int, limit: int
    ) -> list[tuple[int, bytes]]:
        return await self._db.run(lambda c: [(int(r[0]), bytes(r[1])) for r in c.execute(
            "SELECT idx, result FROM lines WHERE job_id = ? AND state = ? AND idx > ? "
            "ORDER BY idx LIMIT ?", (job_id, "ok" if ok else "error", after, limit))])  # fmt: skip


def _claim(row: tuple[object, ...]) -> Claim:

    job_id, idx, custom_id, request, attempts, tenant, data = row
    extra = parse_json(data)  # type: ignore[arg-type]
    return Claim(
        job_id=str(job_id), idx=int(idx), custom_id=str(custom_id),  # type: ignore[call-overload]
        request=bytes(request), attempts=int(attempts) + 1,  # type: ignore[call-overload]
        tenant=str(tenant), endpoint=str(extra["endpoint"]), key_id=extra.get("key_id"),
        not_after=not_after_of(extra),
    )  # fmt: skip
