"""The job store in PostgreSQL: several gateway processes share one batch's lines.

Claims are `SELECT ... FOR UPDATE SKIP LOCKED` in the statement that sets the lease, so two
replicas claiming at once take disjoint lines without waiting on each other; the lease (holder,
expiry) is what outlives the statement: a replica that dies stops renewing, its leases lapse,
and another replica's next claim takes its lines. `finish` writes only while a line is pending,
so a line has one result even when a lapsed holder comes back and finishes it too.

psycopg 3 because it is async-native (no thread per query, unlike psycopg2 behind
`to_thread`) and the maintained PostgreSQL driver; one connection per process, its statements
serialised by a lock (the runner's load is a few statements per batch of lines; a pool would
buy nothing measurable here). A broken connection is dropped and reopened on the next call.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import orjson
import psycopg

from levergate.batch.model import Claim, Counts, FileRecord, Job, LineRow
from levergate.batch.store import StoreError

T = TypeVar("T")
SCHEMA = """
CREATE TABLE IF NOT EXISTS lg_files (
  seq BIGSERIAL PRIMARY KEY, id TEXT UNIQUE NOT NULL, tenant TEXT NOT NULL,
  filename TEXT NOT NULL, purpose TEXT NOT NULL, bytes BIGINT NOT NULL,
  created_at BIGINT NOT NULL, lines INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS lg_jobs (
  seq BIGSERIAL PRIMARY KEY, id TEXT UNIQUE NOT NULL, tenant TEXT NOT NULL,
  kind TEXT NOT NULL, status TEXT NOT NULL, created_at BIGINT NOT NULL,
  expires_at BIGINT NOT NULL, holder TEXT, lease_until DOUBLE PRECISION, data BYTEA NOT NULL);
CREATE TABLE IF NOT EXISTS lg_lines (
  job_id TEXT NOT NULL, idx INTEGER NOT NULL, custom_id TEXT NOT NULL, request BYTEA,
  state TEXT NOT NULL, holder TEXT, lease_until DOUBLE PRECISION,
  attempts INTEGER NOT NULL DEFAULT 0, result BYTEA, PRIMARY KEY (job_id, idx));
CREATE INDEX IF NOT EXISTS lg_lines_pending ON lg_lines (job_id, idx) WHERE state = 'pending';
CREATE INDEX IF NOT EXISTS lg_lines_holder ON lg_lines (holder) WHERE state = 'pending';
"""
JOB_COLUMNS = "id, tenant, status, kind, created_at, expires_at, data"
FILE_COLUMNS = "id, tenant, filename, purpose, bytes, created_at, lines"
NEEDS_WORK = """
  j.status IN ('validating', 'cancelling', 'finalizing')
  OR (j.status = 'in_progress' AND (j.expires_at < %(now)s OR NOT EXISTS (
      SELECT 1 FROM lg_lines l WHERE l.job_id = j.id AND l.state = 'pending')))
"""
CLAIM = """
WITH picked AS (
  SELECT l.job_id, l.idx FROM lg_lines l JOIN lg_jobs j ON j.id = l.job_id
  WHERE j.status = 'in_progress' AND l.state = 'pending'
    AND (l.lease_until IS NULL OR l.lease_until < %(now)s)
  ORDER BY j.seq, l.idx LIMIT %(limit)s FOR UPDATE OF l SKIP LOCKED)
UPDATE lg_lines l SET holder = %(holder)s, lease_until = %(until)s, attempts = l.attempts + 1
FROM picked, lg_jobs j WHERE l.job_id = picked.job_id AND l.idx = picked.idx AND j.id = l.job_id
RETURNING l.job_id, l.idx, l.custom_id, l.request, l.attempts, j.tenant, j.data
"""

Cursor = psycopg.AsyncCursor[tuple[Any, ...]]


def _job(row: Sequence[Any]) -> Job:
    id_, tenant, status, kind, created, expires, data = row
    return Job.from_row(id=id_, tenant=tenant, status=status, kind=kind, created_at=created,
                        expires_at=expires, data=bytes(data))  # fmt: skip


def _file(row: Sequence[Any]) -> FileRecord:
    return FileRecord(*row)


class PostgresStore:
    def __init__(self, dsn: str, *, timeout: float) -> None:
        self._dsn = dsn
        self._timeout = timeout
        self._conn: psycopg.AsyncConnection[tuple[Any, ...]] | None = None
        self._lock = asyncio.Lock()

    async def aclose(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await conn.close()

    async def _run(self, work: Callable[[Cursor], Awaitable[T]]) -> T:
        """One unit of work in one transaction; every driver failure becomes StoreError."""
        async with self._lock:
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = await self._connect()
                async with self._conn.transaction(), self._conn.cursor() as cur:
                    return await work(cur)
            except psycopg.Error as exc:
                if self._conn is not None and self._conn.broken:
                    self._conn = None
                raise StoreError(f"postgres: {type(exc).__name__}: {exc}") from exc

    async def _connect(self) -> psycopg.AsyncConnection[tuple[Any, ...]]:
        ms = int(self._timeout * 1000)
        conn = await psycopg.AsyncConnection.connect(
            self._dsn, autocommit=True, connect_timeout=max(1, int(self._timeout)),
            options=f"-c statement_timeout={ms} -c lock_timeout={ms}",
        )  # fmt: skip
        async with conn.transaction():
            # Two processes starting at once both create the tables: one waits on this lock.
            await conn.execute("SELECT pg_advisory_xact_lock(7140142)")
            await conn.execute(SCHEMA)
        return conn

    # ---- files ----------------------------------------------------------------------------

    async def add_file(self, record: FileRecord) -> None:
        r = record

        async def work(cur: Cursor) -> None:
            await cur.execute(
                f"INSERT INTO lg_files ({FILE_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s) "
                "ON CONFLICT (id) DO NOTHING",
                (r.id, r.tenant, r.filename, r.purpose, r.bytes, r.created_at, r.lines),
            )

        await self._run(work)

    async def get_file(self, file_id: str, *, tenant: str | None) -> FileRecord | None:
        async def work(cur: Cursor) -> FileRecord | None:
            await cur.execute(f"SELECT {FILE_COLUMNS} FROM lg_files WHERE id = %s", (file_id,))
            row = await cur.fetchone()
            return None if row is None or tenant not in (None, row[1]) else _file(row)

        return await self._run(work)

    async def list_files(
        self, *, tenant: str, purpose: str | None, after: str | None, limit: int
    ) -> list[FileRecord]:
        async def work(cur: Cursor) -> list[FileRecord]:
            await cur.execute(
                f"SELECT {FILE_COLUMNS} FROM lg_files WHERE tenant = %(t)s "
                "AND (%(p)s::text IS NULL OR purpose = %(p)s) AND (%(a)s::text IS NULL OR seq < "
                "COALESCE((SELECT seq FROM lg_files WHERE id = %(a)s), -1)) "
                "ORDER BY seq DESC LIMIT %(n)s",
                {"t": tenant, "p": purpose, "a": after, "n": limit},
            )
            return [_file(r) for r in await cur.fetchall()]

        return await self._run(work)

    async def delete_file(self, file_id: str, *, tenant: str) -> bool:
        async def work(cur: Cursor) -> bool:
            await cur.execute(
                "DELETE FROM lg_files WHERE id = %s AND tenant = %s", (file_id, tenant)
            )
            return cur.rowcount > 0

        return await self._run(work)

    # ---- jobs -----------------------------------------------------------------------------

    async def add_job(self, job: Job) -> None:
        j = job

        async def work(cur: Cursor) -> None:
            await cur.execute(
                f"INSERT INTO lg_jobs ({JOB_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                (j.id, j.tenant, j.status, j.kind, j.created_at, j.expires_at, j.data()),
            )

        await self._run(work)

    async def get_job(self, job_id: str, *, tenant: str | None) -> Job | None:
        async def work(cur: Cursor) -> Job | None:
            await cur.execute(f"SELECT {JOB_COLUMNS} FROM lg_jobs WHERE id = %s", (job_id,))
            row = await cur.fetchone()
            return None if row is None or tenant not in (None, row[1]) else _job(row)

        return await self._run(work)

    async def list_jobs(self, *, tenant: str, after: str | None, limit: int) -> list[Job]:
        async def work(cur: Cursor) -> list[Job]:
            await cur.execute(
                f"SELECT {JOB_COLUMNS} FROM lg_jobs WHERE tenant = %(t)s AND kind = 'batch' "
                "AND (%(a)s::text IS NULL OR seq < "
                "COALESCE((SELECT seq FROM lg_jobs WHERE id = %(a)s), -1)) "
                "ORDER BY seq DESC LIMIT %(n)s",
                {"t": tenant, "a": after, "n": limit},
            )
            return [_job(r) for r in await cur.fetchall()]

        return await self._run(work)

    async def save(self, job: Job, *, expect: str) -> bool:
        async def work(cur: Cursor) -> bool:
            await cur.execute(
                "UPDATE lg_jobs SET status = %s, data = %s WHERE id = %s AND status = %s",
                (job.status, job.data(), job.id, expect),
            )
            return cur.rowcount > 0

        return await self._run(work)

    async def lease(self, *, holder: str, now: float, until: float) -> Job | None:
        async def work(cur: Cursor) -> Job | None:
            await cur.execute(
                f"SELECT {JOB_COLUMNS} FROM lg_jobs j WHERE (j.lease_until IS NULL OR "
                f"j.lease_until < %(now)s) AND ({NEEDS_WORK}) "
                "ORDER BY j.seq LIMIT 1 FOR UPDATE SKIP LOCKED",
                {"now": now},
            )
            row = await cur.fetchone()
            if row is None:
                return None
            await cur.execute(
                "UPDATE lg_jobs SET holder = %s, lease_until = %s WHERE id = %s",
                (holder, until, row[0]),
            )
            return _job(row)

        return await self._run(work)

    async def release(self, job_id: str, *, holder: str) -> None:
        async def work(cur: Cursor) -> None:
            await cur.execute(
                "UPDATE lg_jobs SET holder = NULL, lease_until = NULL WHERE id = %s "
                "AND holder = %s",
                (job_id, holder),
            )

        await self._run(work)

    # ---- lines ----------------------------------------------------------------------------

    async def clear_lines(self, job_id: str) -> None:
        async def work(cur: Cursor) -> None:
            await cur.execute("DELETE FROM lg_lines WHERE job_id = %s", (job_id,))

        await self._run(work)

    async def add_lines(self, job_id: str, rows: Sequence[LineRow]) -> None:
        async def work(cur: Cursor) -> None:
            async with cur.copy(
                "COPY lg_lines (job_id, idx, custom_id, request, state, result) FROM STDIN"
            ) as copy:
                for r in rows:
                    state = "pending" if r.request is not None else "error"
                    await copy.write_row((job_id, r.idx, r.custom_id, r.request, state, r.result))

        await self._run(work)

    async def claim(self, *, holder: str, now: float, until: float, limit: int) -> list[Claim]:
        async def work(cur: Cursor) -> list[Claim]:
            params = {"holder": holder, "now": now, "until": until, "limit": limit}
            await cur.execute(CLAIM, params)
            return [_claim(r) for r in await cur.fetchall()]

        return await self._run(work)

    async def renew(self, *, holder: str, until: float) -> int:
        async def work(cur: Cursor) -> int:
            await cur.execute(
                "UPDATE lg_jobs SET lease_until = %s WHERE holder = %s", (until, holder)
            )
            await cur.execute(
                "UPDATE lg_lines SET lease_until = %s WHERE holder = %s AND state = 'pending'",
                (until, holder),
            )
            return cur.rowcount

        return await self._run(work)

    async def retry_later(self, job_id: str, idx: int, *, holder: str, at: float) -> None:
        async def work(cur: Cursor) -> None:
            await cur.execute(
                "UPDATE lg_lines SET holder = NULL, lease_until = %s WHERE job_id = %s "
                "AND idx = %s AND holder = %s AND state = 'pending'",
                (at, job_id, idx, holder),
            )

        await self._run(work)

    async def finish(self, job_id: str, results: Sequence[tuple[int, bool, bytes]]) -> int:
        async def work(cur: Cursor) -> int:
            written = 0
            for idx, ok, result in results:
                await cur.execute(
                    "UPDATE lg_lines SET state = %s, result = %s, holder = NULL, request = NULL "
                    "WHERE job_id = %s AND idx = %s AND state = 'pending'",
                    ("ok" if ok else "error", result, job_id, idx),
                )
                written += cur.rowcount
            return written

        return await self._run(work)

    async def unleased(self, job_id: str, *, now: float, limit: int) -> list[tuple[int, str]]:
        async def work(cur: Cursor) -> list[tuple[int, str]]:
            await cur.execute(
                "SELECT idx, custom_id FROM lg_lines WHERE job_id = %s AND state = 'pending' "
                "AND (lease_until IS NULL OR lease_until < %s OR holder IS NULL) "
                "ORDER BY idx LIMIT %s",
                (job_id, now, limit),
            )
            return [(int(r[0]), str(r[1])) for r in await cur.fetchall()]

        return await self._run(work)

    async def counts(self, job_id: str) -> Counts:
        async def work(cur: Cursor) -> Counts:
            await cur.execute(
                "SELECT state, COUNT(*) FROM lg_lines WHERE job_id = %s GROUP BY state", (job_id,)
            )
            found = {str(r[0]): int(r[1]) for r in await cur.fetchall()}
            ok, failed = found.get("ok", 0), found.get("error", 0)
            return Counts(total=ok + failed + found.get("pending", 0), ok=ok, failed=failed)

        return await self._run(work)

    async def results(
        self, job_id: str, *, ok: bool, after: int, limit: int
    ) -> list[tuple[int, bytes]]:
        async def work(cur: Cursor) -> list[tuple[int, bytes]]:
            await cur.execute(
                "SELECT idx, result FROM lg_lines WHERE job_id = %s AND state = %s AND idx > %s "
                "ORDER BY idx LIMIT %s",
                (job_id, "ok" if ok else "error", after, limit),
            )
            return [(int(r[0]), bytes(r[1])) for r in await cur.fetchall()]

        return await self._run(work)


def _claim(row: Sequence[Any]) -> Claim:
    job_id, idx, custom_id, request, attempts, tenant, data = row
    extra = orjson.loads(bytes(data))
    return Claim(
        job_id=job_id, idx=idx, custom_id=custom_id, request=bytes(request),
        attempts=int(attempts), tenant=tenant, endpoint=str(extra["endpoint"]),
        key_id=extra.get("key_id"),
    )  # fmt: skip
