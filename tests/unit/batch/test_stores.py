"""The lease logic, the same for both job stores (SQLite here; PostgreSQL when it answers):
times are given explicitly (a ManualClock's), so a lapse is a number, never a sleep."""

from __future__ import annotations

from collections.abc import Awaitable
from pathlib import Path
from typing import Any

from levergate.batch.model import Job, LineRow
from levergate.batch.store import Store
from levergate.batch.stores.postgres import PostgresStore
from levergate.batch.stores.sqlite import SqliteStore
from levergate.testing import ManualClock
from tests.postgres_required import postgres_database

LEASE = 30.0


async def running_job(store: Store, job_id: str, lines: int, *, refused: int = 0) -> Job:
    job = Job(
        id=job_id,
        tenant="t",
        status="validating",
        endpoint="/v1/chat/completions",
        input_file_id="f",
        created_at=0,
        expires_at=10**9,
    )
    await store.add_job(job)
    rows = [LineRow(i, f"c{i}", b"{}") for i in range(lines)]
    rows += [LineRow(lines + i, f"r{i}", None, b'{"refused":1}') for i in range(refused)]
    await store.add_lines(job.id, rows)
    running = job.moved("in_progress", now=1)
    assert await store.save(running, expect="validating")
    return running


async def test_a_claimed_line_is_nobody_elses_until_its_lease_lapses(store: Store) -> None:
    clock = ManualClock()
    await running_job(store, "batch_a", 3)
    now = clock.now()
    first = await store.claim(holder="h1", now=now, until=now + LEASE, limit=2)
    second = await store.claim(holder="h2", now=now, until=now + LEASE, limit=10)
    assert [c.idx for c in first] == [0, 1]
    assert [c.idx for c in second] == [2]
    clock.advance(LEASE / 2)
    await store.renew(holder="h2", until=clock.now() + LEASE)  # h2 lives; h1 died
    clock.advance(LEASE / 2 + 1)  # h1's leases lapse, h2 takes them
    now = clock.now()
    taken = await store.claim(holder="h2", now=now, until=now + LEASE, limit=10)
    assert [c.idx for c in taken] == [0, 1]
    assert [c.attempts for c in taken] == [2, 2]


async def test_renewal_keeps_a_live_holders_lines(store: Store) -> None:
    clock = ManualClock()
    await running_job(store, "batch_b", 2)
    now = clock.now()
    await store.claim(holder="h1", now=now, until=now + LEASE, limit=10)
    clock.advance(LEASE * 0.9)
    assert await store.renew(holder="h1", until=clock.now() + LEASE) == 2
    clock.advance(LEASE * 0.9)
    assert await store.claim(holder="h2", now=clock.now(), until=clock.now() + LEASE, limit=9) == []


async def test_a_line_has_one_result_however_many_holders_finish_it(store: Store) -> None:
    await running_job(store, "batch_c", 1)
    await store.claim(holder="h1", now=0, until=1, limit=1)
    await store.claim(holder="h2", now=2, until=40, limit=1)  # h1's lease lapsed
    assert await store.finish("batch_c", [(0, True, b"from h2")]) == 1
    assert await store.finish("batch_c", [(0, False, b"from h1, late")]) == 0
    assert await store.results("batch_c", ok=True, after=-1, limit=10) == [(0, b"from h2")]
    assert await store.results("batch_c", ok=False, after=-1, limit=10) == []


async def test_retry_later_hides_a_line_until_its_time(store: Store) -> None:
    await running_job(store, "batch_d", 1)
    await store.claim(holder="h1", now=0, until=30, limit=1)
    await store.retry_later("batch_d", 0, holder="h1", at=5)
    assert await store.claim(holder="h1", now=4, until=30, limit=1) == []
    assert len(await store.claim(holder="h1", now=6, until=30, limit=1)) == 1


async def test_refused_lines_count_as_failed_and_jobs_lease_once(store: Store) -> None:
    await running_job(store, "batch_e", 2, refused=1)
    counts = await store.counts("batch_e")
    assert (counts.total, counts.ok, counts.failed, counts.open) == (3, 0, 1, 2)
    await store.finish("batch_e", [(0, True, b"a"), (1, True, b"b")])
    leased = await store.lease(holder="h1", now=0, until=30)
    assert leased is not None
    assert leased.id == "batch_e"  # in_progress with nothing pending: it needs finalizing
    assert await store.lease(holder="h2", now=1, until=31) is None
    assert await store.lease(holder="h2", now=31, until=61) is not None


async def test_save_is_a_compare_and_set_on_the_status(store: Store) -> None:
    job = await running_job(store, "batch_f", 1)
    cancelling = job.moved("cancelling", now=2)
    finalizing = job.moved("finalizing", now=2, end="completed")
    assert await store.save(cancelling, expect="in_progress")
    assert not await store.save(finalizing, expect="in_progress")
    found = await store.get_job("batch_f", tenant="t")
    assert found is not None
    assert found.status == "cancelling"
    assert await store.get_job("batch_f", tenant="other") is None


async def test_a_jobs_attempts_count_each_lease_until_a_settled_release(store: Store) -> None:
    # The poison-job guard's count (batch/runner.py): a process that dies mid-step leaves its
    # attempt counted; a step that failed keeps counting; only a settled release clears it.
    await running_job(store, "batch_g", 1)
    await store.finish("batch_g", [(0, True, b"a")])  # nothing pending: it needs finalizing
    counted = []
    for now in (0, 40, 80):  # each lease lapses unreleased: its holder died
        job = await store.lease(holder=f"h{now}", now=now, until=now + 30)
        assert job is not None
        counted.append(job.attempts)
    assert counted == [1, 2, 3]
    await store.release("batch_g", holder="h80", settled=False)  # a failed step: still counting
    job = await store.lease(holder="h", now=120, until=150)
    assert job is not None
    assert job.attempts == 4
    await store.release("batch_g", holder="h")  # settled
    job = await store.lease(holder="h", now=160, until=190)
    assert job is not None
    assert job.attempts == 1
    # Not part of the job's data: saving the job leaves the count to the store.
    assert await store.save(job.moved("finalizing", now=161, end="completed"), expect=job.status)
    saved = await store.get_job("batch_g", tenant=None)
    assert saved is not None
    assert saved.attempts == 0  # reads outside a lease do not report it


OLD_JOBS = (
    "CREATE TABLE {name} (seq {serial} PRIMARY KEY, id TEXT UNIQUE NOT NULL, tenant TEXT NOT NULL,"
    " kind TEXT NOT NULL, status TEXT NOT NULL, created_at BIGINT NOT NULL, expires_at BIGINT "
    "NOT NULL, holder TEXT, lease_until DOUBLE PRECISION, data {blob} NOT NULL)"
)


async def test_a_store_made_before_attempts_were_counted_gains_the_column(tmp_path: Path) -> None:
    import sqlite3

    import psycopg

    path = tmp_path / "old.sqlite3"
    with sqlite3.connect(path) as conn:
        conn.execute(OLD_JOBS.format(name="jobs", serial="INTEGER", blob="BLOB"))
    sqlite = SqliteStore(path, timeout=5)
    try:
        await running_job(sqlite, "batch_old", 0)
        job = await sqlite.lease(holder="h", now=0, until=30)
        assert job is not None
        assert job.attempts == 1
    finally:
        await sqlite.aclose()
    async with postgres_database("levergate_batch_old") as dsn:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await conn.execute(OLD_JOBS.format(name="lg_jobs", serial="BIGSERIAL", blob="BYTEA"))
        pg = PostgresStore(dsn, timeout=5)
        try:
            await running_job(pg, "batch_old", 0)
            job = await pg.lease(holder="h", now=0, until=30)
            assert job is not None
            assert job.attempts == 1
        finally:
            await pg.aclose()


async def test_each_postgres_call_is_one_round_trip(tmp_path: Path) -> None:
    """The runner's bookkeeping runs on the event loop client requests share, a statement's cost
    each (the soak, issue 20): every call is one statement, no `BEGIN` / `COMMIT` around it,
    and a finish of many lines is one statement too. libpq's trace of the protocol counts the
    messages that end a round trip (`Sync` after an extended query, `Query` for a simple one)."""
    from psycopg import pq

    async with postgres_database("levergate_batch_trips") as dsn:
        pg = PostgresStore(dsn, timeout=5)
        try:
            await running_job(pg, "batch_t", 3)
            trace = tmp_path / "libpq.trace"

            async def trips(call: Awaitable[object]) -> list[str]:
                conn = pg._conn
                assert conn is not None
                with trace.open("w") as out:
                    conn.pgconn.trace(out.fileno())
                    conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS)
                    try:
                        await call
                    finally:
                        conn.pgconn.untrace()
                sent = [row.split("\t") for row in trace.read_text().splitlines()]
                return [
                    " ".join(row[2:])
                    for row in sent
                    if row[0] == "F" and row[2] in ("Sync", "Query")
                ]

            assert len(await trips(pg.claim(holder="h", now=0, until=30, limit=3))) == 1
            assert len(await trips(pg.renew(holder="h", until=40))) == 1
            finished = [(0, True, b"a"), (1, False, b"b"), (2, True, b"c")]
            assert len(await trips(pg.finish("batch_t", finished))) == 1
            assert await pg.results("batch_t", ok=True, after=-1, limit=9) == [(0, b"a"), (2, b"c")]
            assert await pg.finish("batch_t", finished) == 0  # each line has its one result
            assert len(await trips(pg.usage(tenant="t"))) == 1
            assert len(await trips(pg.lease(holder="h", now=0, until=30))) == 1
            assert len(await trips(pg.counts("batch_t"))) == 1
        finally:
            await pg.aclose()


async def test_a_postgres_claim_reads_the_lines_it_takes_not_every_pending_one() -> None:
    """A claim walks each open job's pending lines in the `lg_lines_pending` index and stops
    at its limit (the soak, issue 20: a join sorted by job and line read all 3,000 lines of a
    queued batch to claim one, 2.6 ms a round trip). PostgreSQL's own count of the rows its scans
    of `lg_lines` produced, for the store's statement, in a transaction rolled back."""
    import json

    import psycopg

    from levergate.batch.stores.postgres import CLAIM

    async with postgres_database("levergate_batch_claim_walk") as dsn:
        pg = PostgresStore(dsn, timeout=5)
        try:
            for name in ("batch_w1", "batch_w2"):
                await running_job(pg, name, 3000)
        finally:
            await pg.aclose()
        async with await psycopg.AsyncConnection.connect(dsn) as conn:
            await conn.execute("ANALYZE")
            params = {"holder": "h", "now": 0.0, "until": 30.0, "limit": 2, "tenant": "t"}
            found = await conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + CLAIM, params)
            row = await found.fetchone()
            assert row is not None
            await conn.rollback()

    def scanned(node: dict[str, Any]) -> int:
        own = 0
        if node.get("Relation Name") == "lg_lines" and "Scan" in node["Node Type"]:
            own = int(node["Actual Rows"]) * int(node["Actual Loops"])
        return own + sum(scanned(child) for child in node.get("Plans", []))

    plan = row[0] if isinstance(row[0], list) else json.loads(row[0])
    read = scanned(plan[0]["Plan"])
    assert read <= 8, read  # 2 taken (+1 looked at in the next job, +2 re-read to update them)
