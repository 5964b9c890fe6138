"""The log's two indexes serve every reader's query (SQLite's query plans), and a log written
by an older levergate loses the four indexes it had beside them, its records kept, on both
engines."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from levergate.requestlog.query import LogFilter
from levergate.requestlog.store import DROPPED, TABLE, LogStore, PostgresLog, SqliteLog
from tests.unit.requestlog.records import rows

START = 1_000_000.0
WINDOW = LogFilter(since=START + 10, until=START + 40)


class _Planned(SqliteLog):
    """A SQLite store that keeps the query plan of each statement it runs."""

    def __init__(self, path: str) -> None:
        super().__init__(path, timeout_seconds=5)
        self.plans: list[tuple[str, list[str]]] = []

    def _fetch(self, conn: Any, sql: str, values: Sequence[Any]) -> list[tuple[Any, ...]]:
        if sql.startswith("SELECT"):
            plan = [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", values)]
            self.plans.append((sql, plan))
        return super()._fetch(conn, sql, values)


def _plans(tmp_path: Path, query: Any) -> list[list[str]]:
    store = _Planned(str(tmp_path / "log.sqlite3"))
    store.write(rows(60))
    store.plans.clear()
    query(store)
    store.close()
    return [plan for sql, plan in store.plans if TABLE in sql]


def _searched(plan: list[str], index: str) -> bool:
    """Whether a step searches the table by `index` ("INDEX name (condition" or "INTEGER
    PRIMARY KEY (..."), covering or not."""
    return any(step.replace("COVERING INDEX", "INDEX").startswith(f"SEARCH {TABLE} USING {index}")
               for step in plan)  # fmt: skip


def test_a_window_or_a_request_id_is_searched_by_its_index(tmp_path: Path) -> None:
    window = [
        lambda s: s.page(WINDOW, cursor=None, limit=10),
        lambda s: s.page(
            LogFilter(tenant="t1", model="auto", since=START + 10), cursor=None, limit=10
        ),
        lambda s: s.summary(WINDOW),
        lambda s: s.series(WINDOW, bucket_seconds=60),
        lambda s: s.groups(WINDOW, by="tenant"),
        lambda s: s.latencies(WINDOW),
        lambda s: s.page(LogFilter(), cursor=(START + 30, 31), limit=10),  # the next page
    ]
    for query in window:
        for plan in _plans(tmp_path, query):
            assert _searched(plan, f"INDEX {TABLE}_ts (ts"), plan
    (plan,) = _plans(tmp_path, lambda s: s.page(LogFilter(request_id="req-7"), cursor=None,
                                                limit=10))  # fmt: skip
    assert _searched(plan, f"INDEX {TABLE}_request (request_id=?)"), plan
    (plan,) = _plans(tmp_path, lambda s: s.after(20, LogFilter(tenant="t1"), limit=10))
    assert _searched(plan, "INTEGER PRIMARY KEY (rowid>?)"), plan


def test_a_page_newest_first_reads_the_time_index_in_order(tmp_path: Path) -> None:
    """No sort of the whole table: the scan stops at the page's last match."""
    for where in (LogFilter(), LogFilter(tenant="t1"), LogFilter(key="key-1"),
                  LogFilter(model="auto"), LogFilter(outcome="error")):  # fmt: skip
        (plan,) = _plans(tmp_path, lambda s, w=where: s.page(w, cursor=None, limit=10))
        assert plan == [f"SCAN {TABLE} USING INDEX {TABLE}_ts"], (where, plan)


def _indexes(store: LogStore) -> set[str]:
    if isinstance(store, PostgresLog):
        sql = ("SELECT indexname FROM pg_indexes WHERE tablename = %s AND "
               "schemaname = current_schema()")  # fmt: skip
    else:
        sql = "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ?"
    return {row[0] for row in store._run(sql, [TABLE])}  # type: ignore[attr-defined]


def test_an_older_logs_extra_indexes_are_dropped_and_its_records_kept(store: LogStore) -> None:
    store.write(rows(20))
    for name, column in zip(DROPPED, ("tenant", "key_id", "model", "alias"), strict=True):
        store._run(f"CREATE INDEX {name} ON {TABLE} ({column}, ts)")  # type: ignore[attr-defined]
    assert set(DROPPED) <= _indexes(store)
    store.close()  # the next call connects again, as a newer levergate starting on the file
    assert store.last_count() == 20  # type: ignore[attr-defined]
    assert not set(DROPPED) & _indexes(store)
    assert {f"{TABLE}_ts", f"{TABLE}_request"} <= _indexes(store)
    assert len(store.page(LogFilter(tenant="t1"), cursor=None, limit=100).records) > 0
