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

Every call is one statement on the autocommit connection: one round trip, and atomic without
`BEGIN` / `COMMIT` around it (a lease is one `UPDATE` over its `FOR UPDATE SKIP LOCKED`
pick, a finish of many lines one `UPDATE` over arrays). Each of those costs the event loop
what a statement does, and the loop is the one client requests share: in the soak's attacked
block (issue 20) the transactions' `BEGIN` and `COMMIT` were more than half of the ~1.6 s the
store took of the gateway's loop (py-spy).

Every call answers within `timeout_seconds`, whatever the server does: `statement_timeout`
and `lock_timeout` bound a server that answers slowly; a hung one (stopped, its network cut)
answers nothing, so the wait for the lock, the connect and the statement are bounded together
by one asyncio deadline, at which the socket is shut down and the connection dropped (a hung
PostgreSQL held `GET /v1/batches`, uploads and async submits for a whole 40 s stall with
`timeout_seconds: 5`). The call then fails as `StoreError`, which a request answers as 503
with `Retry-After` (batch/service.py) and the runner retries.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import Any, TypeVar

import psycopg

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

T = TypeVar("T")
SCHEMA = """
CREATE TABLE IF NOT EXISTS lg_files (
  seq BIGSERIAL PRIMARY KEY, id TEXT UNIQUE NOT NULL, tenant TEXT NOT NULL,
  filename TEXT NOT NULL, purpose TEXT NOT NULL, bytes BIGINT NOT NULL,
  created_at BIGINT NOT NULL, lines INTEGER NOT NULL, expires_at BIGINT);
CREATE TABLE IF NOT EXISTS lg_jobs (
  seq BIGSERIAL PRIMARY KEY, id TEXT UNIQUE NOT NULL, tenant TEXT NOT NULL,
  kind TEXT NOT NULL, status TEXT NOT NULL, created_at BIGINT NOT NULL,
  expires_at BIGINT NOT NULL, holder TEXT, lease_until DOUBLE PRECISION, data BYTEA NOT NULL,
  attempts INTEGER NOT NULL DEFAULT 0, bytes BIGINT NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS lg_lines (
  job_id TEXT NOT NULL, idx INTEGER NOT NULL, custom_id TEXT NOT NULL, request BYTEA,
  state TEXT NOT NULL, holder TEXT, lease_until DOUBLE PRECISION,
  attempts INTEGER NOT NULL DEFAULT 0, result BYTEA, PRIMARY KEY (job_id, idx));
CREATE INDEX IF NOT EXISTS lg_lines_pending ON lg_lines (job_id, idx) WHERE state = 'pending';
CREATE INDEX IF NOT EXISTS lg_lines_holder ON lg_lines (holder) WHERE state = 'pending';
CREATE INDEX IF NOT EXISTS lg_jobs_status ON lg_jobs (status, seq);
"""
# Indexes over added columns: made once they exist.
INDEXES = (
    """
CREATE INDEX IF NOT EXISTS lg_files_tenant ON lg_files (tenant);
CREATE INDEX IF NOT EXISTS lg_files_expiry ON lg_files (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS lg_jobs_open ON lg_jobs (tenant, kind)
  WHERE status NOT IN """
    + OPEN_NOT
    + """;
"""
)
JOB_COLUMNS = "id, tenant, status, kind, created_at, expires_at, data, bytes"
FILE_COLUMNS = "id, tenant, filename, purpose, bytes, created_at, lines, expires_at"
NEEDS_WORK = """
  j.status IN ('validating', 'cancelling', 'finalizing')
  OR (j.status = 'in_progress' AND (j.expires_at < %(now)s OR NOT EXISTS (
      SELECT 1 FROM lg_lines l WHERE l.job_id = j.id AND l.state = 'pending')))
"""
# Each open job's pending lines walked in the `lg_lines_pending` index, a job at a time, oldest
# job first, stopping at `limit`: a join sorted by (job, line) read and sorted every pending line
# of the first job before locking a few (3,000 of a 3,000-line batch for a claim of 1, 2.6 ms a
# round trip; the soak's hostile tenant keeps thousands queued).
CLAIM = """
WITH picked AS (
  SELECT l.job_id, l.idx FROM lg_jobs j CROSS JOIN LATERAL (
    SELECT p.job_id, p.idx FROM lg_lines p
    WHERE p.job_id = j.id AND p.state = 'pending'
      AND (p.lease_until IS NULL OR p.lease_until < %(now)s)
    ORDER BY p.idx LIMIT %(limit)s FOR UPDATE SKIP LOCKED) l
  WHERE j.status = 'in_progress' AND (%(tenant)s::text IS NULL OR j.tenant = %(tenant)s)
  ORDER BY j.seq, l.idx LIMIT %(limit)s),
leased AS (
  UPDATE lg_lines l SET holder = %(holder)s, lease_until = %(until)s, attempts = l.attempts + 1
  FROM picked, lg_jobs j WHERE l.job_id = picked.job_id AND l.idx = picked.idx AND j.id = l.job_id
  RETURNING l.job_id, l.idx, l.custom_id, l.request, l.attempts, j.tenant, j.data, j.seq)
SELECT job_id, idx, custom_id, request, attempts, tenant, data FROM leased ORDER BY seq, idx
"""
LEASE = f"""
UPDATE lg_jobs SET holder = %(holder)s, lease_until = %(until)s, attempts = attempts + 1
WHERE id = (
  SELECT j.id FROM lg_jobs j WHERE (j.lease_until IS NULL OR j.lease_until < %(now)s)
    AND ({NEEDS_WORK})
  ORDER BY (j.tenant = ANY(%(avoid)s::text[])), j.seq LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING {JOB_COLUMNS}, attempts
"""
FINISH = """
UPDATE lg_lines l SET state = v.state, result = v.result, holder = NULL, request = NULL
FROM unnest(%(idx)s::integer[], %(state)s::text[], %(result)s::bytea[]) AS v(idx, state, result)
WHERE l.job_id = %(job)s AND l.idx = v.idx AND l.state = 'pending'
"""
CLAIMABLE = """
SELECT j.tenant FROM lg_jobs j WHERE j.status = 'in_progress' AND EXISTS (
  SELECT 1 FROM lg_lines l WHERE l.job_id = j.id AND l.state = 'pending'
    AND (l.lease_until IS NULL OR l.lease_until < %(now)s))
GROUP BY j.tenant ORDER BY MIN(j.seq)
"""

Cursor = psycopg.AsyncCursor[tuple[Any, ...]]


# Columns added since the first release, added to a database made before them.
ADDED = (
    ("lg_files", "expires_at", "BIGINT"),
    ("lg_jobs", "attempts", "INTEGER NOT NULL DEFAULT 0"),
    ("lg_jobs", "bytes", "BIGINT NOT NULL DEFAULT 0"),
)


async def _add_columns(conn: psycopg.AsyncConnection[tuple[Any, ...]]) -> None:
    """A database made before a column existed gains it (its values start at the default).
    Looked up first: ALTER TABLE would take the table's exclusive lock on every connect."""
    for table, column, declared in ADDED:
        found = await conn.execute(
            "SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema() "
            "AND table_name = %s AND column_name = %s",
            (table, column),
        )
        if await found.fetchone() is None:
            await conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declared}")


def _job(row: Sequence[Any], *, attempts: int = 0) -> Job:
    id_, tenant, status, kind, created, expires, data, size = row
    return Job.from_row(id=id_, tenant=tenant, status=status, kind=kind, created_at=created,
                        expires_at=expires, data=bytes(data), attempts=attempts,
                        holds=int(size))  # fmt: skip


def _file(row: Sequence[Any]) -> FileRecord:
    return FileRecord(*row)


class PostgresStore:
    def __init__(self, dsn: str, *, timeout: float) -> None:
        self._dsn = dsn
        self._timeout = timeout
        self._conn: psycopg.AsyncConnection[tuple[Any, ...]] | None = None
        self._lock = asyncio.Lock()
        # Connects given up on at a deadline, left to finish (psycopg's own connect timeout
        # bounds them) so that a connection made just too late is closed, not leaked.
        self._late: set[asyncio.Task[None]] = set()

    async def aclose(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await conn.close()
        await asyncio.gather(*self._late)

    async def _run(self, work: Callable[[Cursor], Awaitable[T]]) -> T:
        """One unit of work (one statement), answered within `timeout` of the call (the wait
        for the lock and the connect included); a driver failure or no answer is StoreError."""
        deadline = asyncio.get_running_loop().time() + self._timeout
        try:
            async with asyncio.timeout_at(deadline):
                await self._lock.acquire()
        except TimeoutError:
            raise StoreError(f"postgres: busy, no turn within {self._timeout:g}s") from None
        try:
            return await self._unit(work, deadline)
        finally:
            self._lock.release()

    async def _unit(self, work: Callable[[Cursor], Awaitable[T]], deadline: float) -> T:
        # The statement's own bound is not a cancellation: cancelled mid-statement, psycopg asks
        # the server to cancel it and waits for that (up to 10 s, against a server that answers
        # nothing). At the deadline the socket is shut down instead, and every wait on it ends
        # at once with a driver error.
        cut = asyncio.Event()
        try:
            if self._conn is None or self._conn.closed:
                self._conn = await self._connected(deadline)
            conn = self._conn
            guard = asyncio.get_running_loop().call_at(deadline, _shut, conn, cut)
            try:
                async with conn.cursor() as cur:
                    return await work(cur)
            finally:
                guard.cancel()
        except (psycopg.Error, TimeoutError) as exc:
            if cut.is_set() or isinstance(exc, TimeoutError):
                await self._discard()
                raise StoreError(f"postgres: no answer within {self._timeout:g}s") from None
            if self._conn is not None and (self._conn.broken or self._conn.closed):
                await self._discard()
            raise StoreError(f"postgres: {type(exc).__name__}: {exc}") from exc
        except BaseException:
            await self._discard()  # cut off mid-statement: its state is unknown, never reused
            raise

    async def _discard(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            _shut(conn)
            with contextlib.suppress(psycopg.Error, OSError):
                await conn.close()  # the socket is shut: nothing to wait for

    async def _connected(self, deadline: float) -> psycopg.AsyncConnection[tuple[Any, ...]]:
        """A new connection by `deadline`. The connect is never cancelled midway (psycopg then
        drops a connection it has just opened, unclosed): one that finishes too late is closed."""
        attempt = asyncio.ensure_future(self._connect())
        try:
            async with asyncio.timeout_at(deadline):
                return await asyncio.shield(attempt)
        except BaseException:
            late = asyncio.ensure_future(_close_when_made(attempt))
            self._late.add(late)
            late.add_done_callback(self._late.discard)
            raise

    async def _connect(self) -> psycopg.AsyncConnection[tuple[Any, ...]]:
        ms = int(self._timeout * 1000)
        seconds = max(1, int(self._timeout))
        conn = await psycopg.AsyncConnection.connect(
            self._dsn, autocommit=True, connect_timeout=max(2, seconds),
            # The network's own bounds, for the runner's idle connection: keepalives find a
            # peer that vanished, tcp_user_timeout one that stopped acknowledging.
            keepalives=1, keepalives_idle=seconds, keepalives_interval=1, keepalives_count=3,
            tcp_user_timeout=ms,
            options=f"-c statement_timeout={ms} -c lock_timeout={ms} "
                    f"-c idle_in_transaction_session_timeout={2 * ms}",
        )  # fmt: skip
        async with conn.transaction():
            # Two processes starting at once both create the tables: one waits on this lock.
            await conn.execute("SELECT pg_advisory_xact_lock(7140142)")
            await conn.execute(SCHEMA)
            await _add_columns(conn)
            await conn.execute(INDEXES)
        return conn

    # ---- files ----------------------------------------------------------------------------

    async def add_file(self, record: FileRecord) -> None:
        r = record

        async def work(cur: Cursor) -> None:
            await cur.execute(
                f"INSERT INTO lg_files ({FILE_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s) "
                "ON CONFLICT (id) DO NOTHING",
                (
                    r.id,
                    r.tenant,
                    r.filename,
                    r.purpose,
                    r.bytes,
                    r.created_at,
                    r.lines,
                    r.expires_at,
                ),
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

    async def expired_files(self, *, now: float, limit: int) -> list[FileRecord]:
        async def work(cur: Cursor) -> list[FileRecord]:
            await cur.execute(
                f"SELECT {FILE_COLUMNS} FROM lg_files WHERE expires_at IS NOT NULL "
                "AND expires_at <= %s ORDER BY expires_at LIMIT %s", (now, limit),
            )  # fmt: skip
            return [_file(r) for r in await cur.fetchall()]

        return await self._run(work)

    async def usage(self, *, tenant: str) -> Usage:
        async def work(cur: Cursor) -> Usage:
            # The files' row has no kind; one statement, so one snapshot of both tables.
            await cur.execute(
                "SELECT NULL, COUNT(*), COALESCE(SUM(bytes), 0) FROM lg_files WHERE tenant = %(t)s"
                " UNION ALL SELECT kind, COUNT(*), COALESCE(SUM(bytes), 0) FROM lg_jobs "
                f"WHERE tenant = %(t)s AND status NOT IN {OPEN_NOT} GROUP BY kind", {"t": tenant},
            )  # fmt: skip
            files, size, open_jobs = 0, 0, dict[str, int]()
            for kind, count, held in await cur.fetchall():
                if kind is None:
                    files = int(count)
                else:
                    open_jobs[str(kind)] = int(count)
                size += int(held)
            return Usage(files, size, open_jobs)

        return await self._run(work)

    # ---- jobs -----------------------------------------------------------------------------

    async def add_job(self, job: Job) -> None:
        j = job

        async def work(cur: Cursor) -> None:
            await cur.execute(
                f"INSERT INTO lg_jobs ({JOB_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                (j.id, j.tenant, j.status, j.kind, j.created_at, j.expires_at, j.data(), j.holds),
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

    async def lease(
        self, *, holder: str, now: float, until: float, avoid: Collection[str] = ()
    ) -> Job | None:
        async def work(cur: Cursor) -> Job | None:
            # The tenants in `avoid` (those this process is busy with) go last (batch/runner.py).
            params = {"holder": holder, "until": until, "now": now, "avoid": list(avoid)}
            await cur.execute(LEASE, params)
            row = await cur.fetchone()
            return None if row is None else _job(row[:-1], attempts=int(row[-1]))

        return await self._run(work)

    async def release(self, job_id: str, *, holder: str, settled: bool = True) -> None:
        async def work(cur: Cursor) -> None:
            await cur.execute(
                "UPDATE lg_jobs SET holder = NULL, lease_until = NULL, attempts = CASE WHEN "
                "%s THEN 0 ELSE attempts END WHERE id = %s AND holder = %s",
                (settled, job_id, holder),
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

    async def claimable(self, *, now: float) -> list[str]:
        """Tenants with a line to claim, the one with the oldest such job first."""

        async def work(cur: Cursor) -> list[str]:
            await cur.execute(CLAIMABLE, {"now": now})
            return [str(r[0]) for r in await cur.fetchall()]

        return await self._run(work)

    async def claim(
        self, *, holder: str, now: float, until: float, limit: int, tenant: str | None = None
    ) -> list[Claim]:
        async def work(cur: Cursor) -> list[Claim]:
            params = {"holder": holder, "now": now, "until": until, "limit": limit,
                      "tenant": tenant}  # fmt: skip
            await cur.execute(CLAIM, params)
            return [_claim(r) for r in await cur.fetchall()]

        return await self._run(work)

    async def renew(self, *, holder: str, until: float) -> int:
        async def work(cur: Cursor) -> int:
            await cur.execute(
                "WITH jobs AS (UPDATE lg_jobs SET lease_until = %(u)s WHERE holder = %(h)s) "
                "UPDATE lg_lines SET lease_until = %(u)s WHERE holder = %(h)s "
                "AND state = 'pending'",
                {"u": until, "h": holder},
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
            await cur.execute(FINISH, {
                "job": job_id, "idx": [idx for idx, _, _ in results],
                "state": ["ok" if ok else "error" for _, ok, _ in results],
                "result": [result for _, _, result in results],
            })  # fmt: skip
            return cur.rowcount

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


async def _close_when_made(attempt: asyncio.Future[psycopg.AsyncConnection[Any]]) -> None:
    with contextlib.suppress(psycopg.Error, OSError):
        await (await attempt).close()


def _shut(conn: psycopg.AsyncConnection[tuple[Any, ...]], cut: asyncio.Event | None = None) -> None:
    """Shut the connection's socket down (both ways) without closing its descriptor, which the
    event loop may still be watching: every wait on it ends at once, with an error."""
    if cut is not None:
        cut.set()
    if conn.closed:
        return
    with (
        contextlib.suppress(OSError, psycopg.Error),
        socket.socket(fileno=os.dup(conn.pgconn.socket)) as sock,
    ):
        sock.shutdown(socket.SHUT_RDWR)


def _claim(row: Sequence[Any]) -> Claim:
    job_id, idx, custom_id, request, attempts, tenant, data = row
    extra = parse_json(bytes(data))
    return Claim(
        job_id=job_id, idx=idx, custom_id=custom_id, request=bytes(request),
        attempts=int(attempts), tenant=tenant, endpoint=str(extra["endpoint"]),
        key_id=extra.get("key_id"), not_after=not_after_of(extra),
    )  # fmt: skip
