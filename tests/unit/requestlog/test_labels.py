"""Shadow labels in the request log: written beside the records on both engines, read back oldest
first without the failed ones, counted per route and day, bounded by age and rows; texts kept
only where bodies are logged and never for a private tenant."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from prometheus_client import CollectorRegistry

from levergate.config.request_log import RequestLogSettings
from levergate.layers.measure.shadow_labels import ShadowLabel, ShadowLabels
from levergate.redact import Redactor
from levergate.requestlog.labels import LABEL_NAMES, Labelled, label_row
from levergate.requestlog.store import LogStore, SqliteLog
from levergate.requestlog.writer import BodyText, LogMetrics, LogWriter

DAY = 86400.0
START = 100 * DAY  # midnight UTC, day 100
SECRET = "sk-upstream-secret-0123456789"  # noqa: S105 - a test value


def label(n: int, *, result: str = "agree", name: str = "auto", tenant: str = "acme",
          prompt: str | None = None) -> ShadowLabel:  # fmt: skip
    return ShadowLabel(
        request_id=f"r{n}", layer="route", name=name, cheap="small", strong="large",
        result=result, compare="normalized", judge_score=None,
        prompt=prompt or f"question {n}", cheap_text=f"cheap {n}", strong_text=f"strong {n}",
        tenant=tenant, feature="faq",
    )  # fmt: skip


def test_labels_read_back_oldest_first_without_failed_ones_and_count_per_day(
    store: LogStore,
) -> None:
    rows = [label_row(START + 3600 * n, label(n, result=("agree", "disagree", "failed")[n % 3]),
                      (f"question {n}", f"cheap {n}", f"strong {n}"))
            for n in range(30)]  # fmt: skip
    rows.append(label_row(START + 5, label(99, name="other"), None))
    store.write_labels(list(reversed(rows)))
    got = store.labels(Labelled(name="auto"), limit=1000)
    assert [g["request_id"] for g in got] == [f"r{n}" for n in range(30) if n % 3 != 2]
    assert {g["result"] for g in got} == {"agree", "disagree"}
    assert got[0]["prompt"] == "question 0"
    assert got[0]["prompt_sha256"]
    later = store.labels(Labelled(name="auto", since=START + DAY), limit=1000)
    assert [g["request_id"] for g in later] == [f"r{n}" for n in range(24, 30) if n % 3 != 2]
    counts = {(c["name"], c["day"]): c for c in store.label_counts(Labelled())}
    first = counts[("auto", START)]
    assert (first["labels"], first["agree"], first["with_prompt"]) == (16, 8, 16)
    assert counts[("auto", START + DAY)]["labels"] == 4
    assert counts[("other", START)]["with_prompt"] == 0


def test_labels_are_bounded_by_age_then_by_rows(store: LogStore) -> None:
    store.write_labels([label_row(START + n, label(n), None) for n in range(50)])
    gone = store.prune_labels(now=START + 10 + 1000, max_age_seconds=1000, max_rows=30)
    assert gone == 20  # ten past the age, then the ten oldest past 30 rows
    left = [g["request_id"] for g in store.labels(Labelled(), limit=100)]
    assert left == [f"r{n}" for n in range(20, 50)]


def writer(path: Path, **values: object) -> tuple[LogWriter, SqliteLog]:
    """The writer (on its own thread's store) and a store to read back with."""
    settings = RequestLogSettings.model_validate({"enabled": True, **values})
    bodies = BodyText(settings.bodies, Redactor([SECRET]))
    metrics = LogMetrics(CollectorRegistry())
    own = SqliteLog(str(path), timeout_seconds=settings.store.timeout_seconds)
    log = LogWriter(own, settings=settings, metrics=metrics, bodies=bodies)
    return log, SqliteLog(str(path), timeout_seconds=1)


async def test_texts_only_where_bodies_are_logged_redacted_and_never_for_private_tenants(
    tmp_path: Path,
) -> None:
    log, store = writer(tmp_path / "log.db",
                        bodies={"models": ["auto"], "private_tenants": ["secretive"]})  # fmt: skip
    hub = ShadowLabels()
    hub.listen(log.labelled)
    hub.emit(label(1, prompt=f"my key is {SECRET}"))
    hub.emit(label(2, tenant="secretive"))
    hub.emit(label(3, name="unlogged"))
    assert await log.flush()
    got = {g["request_id"]: g for g in store.labels(Labelled(), limit=10)}
    assert got["r1"]["prompt"] == "my key is [redacted]"
    assert got["r1"]["cheap_text"] == "cheap 1"
    assert got["r1"]["strong_text"] == "strong 1"
    for private in ("r2", "r3"):
        assert got[private]["prompt"] is None
        assert got[private]["cheap_text"] is None
        assert got[private]["prompt_sha256"] is not None  # still counted, recognisable
    await log.aclose()


async def test_a_full_label_queue_drops_instead_of_growing(tmp_path: Path) -> None:
    log, store = writer(tmp_path / "log.db", max_queue=10)
    for n in range(25):
        log.labelled(label(n))
    assert await log.flush()
    assert len(store.labels(Labelled(), limit=100)) == 10
    await log.aclose()


async def test_labels_a_locked_store_refused_are_kept_and_written_later(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    log, store = writer(path, store={"timeout_seconds": 0.05})
    store.write_labels([])  # nothing to write: no statement at all
    assert store.labels(Labelled(), limit=1) == []  # the tables exist before the lock
    for n in range(3):
        log.labelled(label(n))
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("PRAGMA journal_mode = WAL")
    holder.execute("BEGIN EXCLUSIVE")  # another process holds the file
    try:
        assert not await log.flush()  # refused, nothing raised, the labels kept in order
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert await log.flush()
    assert [g["request_id"] for g in store.labels(Labelled(), limit=10)] == ["r0", "r1", "r2"]
    await log.aclose()


def test_labels_page_after_a_cursor_and_filter_by_layer(store: LogStore) -> None:
    semantic = label(50)._replace(layer="semantic", result="none", similarity=None,
                                  detail='{"floor": 0.85}')  # fmt: skip
    rows = [label_row(START + n, label(n), None) for n in range(5)]
    rows.append(label_row(START + 10, semantic, None))
    store.write_labels(rows)
    first = store.labels(Labelled(name="auto"), limit=2)
    rest = store.labels(Labelled(name="auto"), limit=10, after=(first[-1]["ts"], first[-1]["seq"]))
    assert [g["request_id"] for g in first + rest] == [f"r{n}" for n in range(5)]
    assert store.labels(Labelled(name="auto", layers=("semantic",)), limit=10) == []  # `none`
    found = store.labels(Labelled(name="auto", layers=("semantic",), uncompared=True), limit=10)
    assert [(g["request_id"], g["similarity"], g["detail"]) for g in found] == [
        ("r50", None, '{"floor": 0.85}')]  # fmt: skip
    assert len(store.labels(Labelled(name="auto", layers=("route", "cascade")), limit=10)) == 5


def test_a_labels_table_of_an_older_levergate_gets_the_new_columns(tmp_path: Path) -> None:
    path = tmp_path / "log.sqlite3"
    old = [name for name in LABEL_NAMES if name not in ("similarity", "detail")]
    with sqlite3.connect(path) as conn:
        conn.execute(f"CREATE TABLE lg_labels (seq INTEGER PRIMARY KEY AUTOINCREMENT, "
                     f"{', '.join(old)})")  # fmt: skip
        marks = ", ".join("?" * len(old))
        insert = f"INSERT INTO lg_labels ({', '.join(old)}) VALUES ({marks})"  # noqa: S608
        conn.execute(insert, label_row(START, label(1), None)[:-2])
    store = SqliteLog(str(path), timeout_seconds=5)
    try:
        store.write_labels([label_row(START + 1, label(2)._replace(similarity=0.9), None)])
        got = store.labels(Labelled(), limit=10)
    finally:
        store.close()
    assert [(g["request_id"], g["similarity"]) for g in got] == [("r1", None), ("r2", 0.9)]
