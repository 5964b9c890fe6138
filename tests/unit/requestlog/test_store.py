"""The log store on both engines (SQLite, and PostgreSQL when reachable): pages cover every
matching record once, newest first; filters, sums and series agree with the rows written; the
age and size bounds hold; a broken connection is reconnected."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from functools import partial
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st

from levergate.layers.measure.record import SCHEMA
from levergate.policies.tiers import Tier, TierDecision
from levergate.requestlog.query import LogFilter, decode_cursor
from levergate.requestlog.row import COLUMNS, LEVERS, NAMES, row_of
from levergate.requestlog.store import (
    PAGE_SIZE,
    LogStore,
    LogStoreError,
    PostgresLog,
    SqliteLog,
    chunk_sizes,
)
from levergate.stores.sqlite_worker import connect
from tests.postgres_required import postgres_database
from tests.unit.requestlog.records import record, rich_record, rows

START = 1_000_000.0


def all_pages(store: LogStore, where: LogFilter, limit: int) -> list[dict[str, Any]]:
    found, cursor = [], None
    while True:
        page = store.page(where, cursor=cursor, limit=limit)
        found += page.records
        if page.next_cursor is None:
            return found
        cursor = decode_cursor(page.next_cursor)


def test_pages_cover_every_match_once_newest_first(store: LogStore) -> None:
    written = rows(57)
    # Two records at the same instant: the sequence breaks the tie, none is skipped.
    written.append(row_of(START + 56, record(99)))
    store.write(written)
    filters = (LogFilter(), LogFilter(tenant="t1"), LogFilter(outcome="error"),
               LogFilter(model="auto", since=START + 10),
               LogFilter(min_cost_usd=0.003))  # fmt: skip
    for where in filters:
        expected = [r for r in written if _matches(r, where)]
        for limit in (1, 7, 100):
            got = all_pages(store, where, limit)
            assert sorted(g["request_id"] for g in got) == sorted(r[1] for r in expected)
            assert [g["ts"] for g in got] == sorted((g["ts"] for g in got), reverse=True)


def _matches(row: tuple[Any, ...], where: LogFilter) -> bool:
    r = dict(zip(NAMES, row, strict=True))
    return (
        (where.tenant is None or r["tenant"] == where.tenant)
        and (where.outcome != "error" or r["outcome"] != "ok")
        and (where.model is None or where.model in (r["model"], r["alias"]))
        and (where.since is None or r["ts"] >= where.since)
        and (where.min_cost_usd is None or r["cost_usd"] >= where.min_cost_usd)
    )


def test_a_record_reads_back_with_every_decision(store: LogStore) -> None:
    store.write([row_of(START, rich_record(), ('{"q": 1}', "an answer"))])
    (got,) = store.page(LogFilter(), cursor=None, limit=10).records
    assert got["detail"]["route"]["router"] == "learned"
    assert got["detail"]["side"] == [{"alias": "fast", "purpose": "cascade", "usd": 0.0005}]
    assert got["detail"]["escalation_reasons"] == ["mean_logprob"]
    assert got["savings"] == {"route": 0.004, "trim": -0.001}
    assert got["saved_usd"] == pytest.approx(0.003)
    assert got["cache"] == "exact:miss"
    assert got["escalations"] == 1
    assert (got["request_body"], got["answer_body"]) == ('{"q": 1}', "an answer")
    assert got["ttft_ms"] == pytest.approx(5.0)
    assert got["schema"] == SCHEMA


def test_summary_series_and_groups_add_up_to_the_rows(store: LogStore) -> None:
    written = rows(40)
    store.write(written)
    cost = sum(r[NAMES.index("cost_usd")] for r in written)
    summary = store.summary(LogFilter())
    assert summary["requests"] == 40
    assert summary["errors"] == 8
    assert summary["cost_usd"] == pytest.approx(cost)
    assert summary["savings"]["exact"] == pytest.approx(0.002 * 14)
    series = store.series(LogFilter(since=START), bucket_seconds=10)
    assert [s["requests"] for s in series] == [10, 10, 10, 10]
    assert [s["ts"] for s in series] == [START, START + 10, START + 20, START + 30]
    assert sum(s["cost_usd"] for s in series) == pytest.approx(cost)
    groups = {g["tenant"]: g["requests"] for g in store.groups(LogFilter(), by="tenant")}
    assert groups == {"t0": 14, "t1": 13, "t2": 13}
    assert store.summary(LogFilter(tenant="nobody"))["requests"] == 0


def test_series_has_each_levers_savings_and_latencies_sample_evenly(store: LogStore) -> None:
    """What the dashboard reads: savings by lever per bucket add up to the summary's, and the
    latency sample is every record up to its bound, else an even spread across the range."""
    written = rows(40)
    store.write(written)
    series = store.series(LogFilter(since=START), bucket_seconds=10)
    exact = sum(s["savings"]["exact"] for s in series)
    assert exact == pytest.approx(store.summary(LogFilter())["savings"]["exact"])
    assert all(set(s["savings"]) == {str(lever) for lever in LEVERS} for s in series)
    every = store.latencies(LogFilter())
    assert [r[0] for r in every] == [START + n for n in range(40)]
    assert [r[1] for r in every] == [r[NAMES.index("total_ms")] for r in written]
    sample = store.latencies(LogFilter(), most=10)
    assert len(sample) == 10
    times = [r[0] for r in sample]
    assert times == sorted(times)
    assert times[0] < START + 5  # the whole range, not its end
    assert times[-1] > START + 34
    assert store.latencies(LogFilter(tenant="nobody")) == []


def test_a_workflows_steps_read_together_with_their_cost(store: LogStore) -> None:
    """One `gw.workflow`'s records (issue 28): its steps by the workflow id, and its cost."""
    steps = [row_of(START + n, record(n, workflow="wf-1", feature=f"step-{n}")) for n in range(3)]
    store.write([*rows(10), *steps])
    got = all_pages(store, LogFilter(workflow="wf-1"), 10)
    assert sorted(g["feature"] for g in got) == ["step-0", "step-1", "step-2"]
    by_workflow = {g["workflow"]: g for g in store.groups(LogFilter(), by="workflow")}
    assert by_workflow["wf-1"]["requests"] == 3
    cost = sum(r[NAMES.index("cost_usd")] for r in steps)
    assert by_workflow["wf-1"]["cost_usd"] == pytest.approx(cost)


def test_prune_keeps_the_age_and_size_bounds(store: LogStore) -> None:
    store.write(rows(300))
    gone = store.prune(now=START + 300, max_age_seconds=100, max_bytes=1 << 40)
    assert gone == 200
    remaining = all_pages(store, LogFilter(), 1000)
    assert min(r["ts"] for r in remaining) >= START + 200
    store.write(rows(2000, start=START + 400))
    # A bound below what 2,100 records take: the oldest go first, the newest stay.
    store.prune(now=START + 2400, max_age_seconds=1e9, max_bytes=200_000)
    left = all_pages(store, LogFilter(), 1000)
    assert 0 < len(left) < 2100
    assert max(r["ts"] for r in left) == START + 400 + 1999
    assert store.prune(now=START + 2400, max_age_seconds=1e9, max_bytes=200_000) == 0


async def test_postgres_restarted_under_the_store_is_reconnected() -> None:
    async with postgres_database("levergate_log_restart") as dsn:
        store = PostgresLog(dsn, timeout_seconds=5)
        store.write(rows(3))
        with psycopg.connect(dsn, autocommit=True) as admin:  # what a restart does to a client
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        with pytest.raises(LogStoreError):
            store.write(rows(3, start=START + 10))
        store.write(rows(3, start=START + 20))  # a new connection
        assert store.summary(LogFilter())["requests"] == 6
        store.close()


def test_a_full_sqlite_file_fails_the_write_not_the_caller(tmp_path: Path) -> None:
    store = SqliteLog(str(tmp_path / "full.sqlite3"), timeout_seconds=1)
    store.write(rows(1))
    store._conn.execute("PRAGMA max_page_count = 1")  # the disk is full, as SQLite sees it
    with pytest.raises(LogStoreError, match="full"):
        store.write(rows(500, start=START + 10))
    store.close()


def _write_on_the_loop(store: SqliteLog, batch: list[tuple[Any, ...]]) -> None:
    for _ in store.writing(batch, at_once=64):  # as the writer's event loop runs it
        pass


@pytest.mark.parametrize("how", ["deleted", "replaced"])
@pytest.mark.parametrize("where", ["thread", "loop"])
def test_a_sqlite_file_deleted_or_replaced_under_the_store_is_made_anew(
    how: str, where: str, tmp_path: Path
) -> None:
    # Until 2026-12 the open connection wrote on into the unlinked file for good: every record
    # counted as written, none readable, all gone at the next start.
    path = tmp_path / "log.sqlite3"
    store = SqliteLog(str(path), timeout_seconds=1.0)
    write = store.write if where == "thread" else partial(_write_on_the_loop, store)
    try:
        store.write(rows(2))
        store.checkpoint()  # its connection open on the file too
        for name in ("log.sqlite3", "log.sqlite3-wal", "log.sqlite3-shm"):
            (tmp_path / name).unlink(missing_ok=True)
        if how == "replaced":  # logrotate's copy moved aside, an empty file in its place
            path.write_bytes(b"")
        with pytest.raises(LogStoreError, match="deleted or replaced"):
            write(rows(1, start=START + 10))  # a failed batch: the writer keeps it
        store.write(rows(1, start=START + 10))  # connects anew
        write(rows(1, start=START + 20))
        store.checkpoint()  # on the new file: its rows copied in
        assert [r["ts"] for r in store.page(LogFilter(), cursor=None, limit=10).records] == [
            START + 20,
            START + 10,
        ]
    finally:
        store.close()
    with closing(sqlite3.connect(path)) as reader:
        assert reader.execute("SELECT COUNT(*) FROM lg_requests").fetchone() == (2,)


def test_a_tier_decision_reads_back(store: LogStore) -> None:
    """How the service tier was decided (issue 26) is in the detail, the tier a column."""
    decision = TierDecision(Tier.STANDARD, "cheapest in time", seconds=300.0,
                            refused=(Tier.FLEX,))  # fmt: skip
    decided = rich_record()._replace(tier="standard", tier_decision=decision, tier_assumed=True)
    store.write([row_of(START, decided)])
    (got,) = store.page(LogFilter(), cursor=None, limit=10).records
    assert got["tier"] == "standard"
    assert got["detail"]["tier"] == {
        "assumed": True, "chosen": "standard", "reason": "cheapest in time", "asked": None,
        "seconds_left": 300.0, "refused": ["flex"], "hedged": None,
    }  # fmt: skip


@given(st.integers(0, 5000), st.integers(1, 1000), st.integers(0, 2000))
def test_a_batch_is_cut_into_few_statements_of_few_sizes(count: int, most: int, whole: int) -> None:
    """SQLite compiles a statement per size: whatever the batch, the sizes are the full batch's
    (`whole`, when it is within `most`; else `most`) and the powers of two below it, each power
    once; a full batch is one statement."""
    sizes = chunk_sizes(count, most, whole=whole)
    step = whole if 0 < whole <= most else most
    assert sum(sizes) == count
    assert all(size == step or (size < step and size & (size - 1) == 0) for size in sizes)
    rest = [size for size in sizes if size != step]
    assert len(rest) == len(set(rest)) <= step.bit_length()
    if count == step:
        assert sizes == [step]


def _statements(store: SqliteLog) -> list[str]:
    """Every statement the store's connection runs from now on (its first word)."""
    ran: list[str] = []
    store._conn.set_trace_callback(lambda sql: ran.append(sql.split(None, 1)[0].upper()))
    return ran


@pytest.mark.parametrize("size", [500, 137])
def test_a_full_batch_is_one_statement_a_part_batch_one_transaction(
    tmp_path: Path, size: int
) -> None:
    """Each statement costs the writer's thread 5 hand-overs of the GIL: a full batch (the
    writer's `batch_size`) is one statement, its own transaction; a part-batch a statement per
    power of two in one transaction. Every row reads back, in order."""
    path = tmp_path / "log.db"
    store = SqliteLog(str(path), timeout_seconds=5, batch_size=size)
    try:
        store.write(rows(1, start=START - 10))  # connects
        ran = _statements(store)
        written = rows(size)
        store.write(written)
        assert ran == ["INSERT"]
        del ran[:]
        store.write(rows(100, start=START + size))  # 64 + 32 + 4
        assert ran == ["BEGIN", "INSERT", "INSERT", "INSERT", "COMMIT"]
    finally:
        store.close()
    assert _stored(path)[1 : size + 1] == [tuple(row) for row in written]


async def test_a_batch_of_several_statements_is_written_whole(tmp_path: Path) -> None:
    store = SqliteLog(str(tmp_path / "log.db"), timeout_seconds=1)
    try:
        store.write(rows(700))  # several statements, in one transaction
        assert store.summary(LogFilter())["requests"] == 700
    finally:
        store.close()


def _stored(path: Path) -> list[tuple[Any, ...]]:
    with closing(sqlite3.connect(path)) as conn:
        sql = f"SELECT {', '.join(NAMES)} FROM lg_requests ORDER BY seq"  # noqa: S608 - our names
        return conn.execute(sql).fetchall()


def test_sqlite_binds_only_the_columns_off_their_default_and_reads_back_every_value(
    tmp_path: Path,
) -> None:
    """A batch's INSERT leaves out the columns at their default (NULL, or 0 in a new table's
    `ZERO_DEFAULT` columns) in every row; every value reads back as written, a None in a
    DEFAULT 0 column still NULL, a 0 the batch's other row needs bound still 0."""
    path = tmp_path / "log.db"
    store = SqliteLog(str(path), timeout_seconds=5)
    written = [row_of(START, record(1)), row_of(START + 1, record(2, retries=3))]
    sent: list[str] = []
    store.last_seq()  # connects
    store._conn.set_trace_callback(sent.append)
    store.write(written)
    at = NAMES.index("cost_usd")
    none_in_zero = (*written[0][:at], None, *written[0][at + 1 :])
    store.write([none_in_zero])
    store.close()
    insert = next(s for s in sent if s.startswith("INSERT"))
    named = insert[insert.index("(") + 1 : insert.index(")")].split(", ")
    assert "saved_exact" not in named  # 0.0: the default
    assert "request_body" not in named  # None: the default
    assert {"ts", "request_id", "retries", "cost_usd"} <= set(named)
    assert _stored(path) == [*written, none_in_zero]


def test_a_table_from_before_the_zero_defaults_binds_its_zeros(tmp_path: Path) -> None:
    """An older table's columns have no DEFAULT 0: a 0 there is bound, not left out (it would
    read back NULL)."""
    path = tmp_path / "log.db"
    columns = ", ".join(f"{name} {kind}" for name, kind in COLUMNS)
    with closing(sqlite3.connect(path)) as conn:
        conn.execute(f"CREATE TABLE lg_requests (seq INTEGER PRIMARY KEY AUTOINCREMENT, "
                     f"{columns})")  # fmt: skip
        conn.commit()
    store = SqliteLog(str(path), timeout_seconds=5)
    written = [row_of(START + n, record(n)) for n in range(3)]
    store.write(written)
    store.close()
    assert _stored(path) == written


def _page_size(path: Path) -> int:
    with closing(sqlite3.connect(path)) as conn:
        return int(conn.execute("PRAGMA page_size").fetchone()[0])


def test_a_new_sqlite_log_has_its_page_size_and_an_older_one_keeps_its_own(
    tmp_path: Path,
) -> None:
    """A new file gets `PAGE_SIZE` pages; a log an older levergate made with SQLite's 4 KiB
    pages (in WAL mode, where a file's pages keep their size) is written and read as before,
    its pages unchanged."""
    new = SqliteLog(str(tmp_path / "new.db"), timeout_seconds=5)
    new.write(rows(3))
    new.close()
    assert _page_size(tmp_path / "new.db") == PAGE_SIZE != 4096
    path = tmp_path / "old.db"
    with closing(connect(str(path), busy_ms=5000)) as conn:  # as levergate made it before
        for statement in SqliteLog(str(path), timeout_seconds=5).schema():
            conn.execute(statement)
        conn.execute(f"INSERT INTO lg_requests ({', '.join(NAMES)}) "  # noqa: S608 - our names
                     f"VALUES ({', '.join('?' * len(NAMES))})", rows(1)[0])  # fmt: skip
    assert _page_size(path) == 4096
    old = SqliteLog(str(path), timeout_seconds=5)
    old.write(rows(500, start=START + 10))
    found = all_pages(old, LogFilter(), limit=100)
    old.prune(now=START + 600, max_age_seconds=3600, max_bytes=10**9)
    old.close()
    assert len(found) == 501
    assert _page_size(path) == 4096
    assert _stored(path) == [*rows(1), *(tuple(r) for r in rows(500, start=START + 10))]
