"""The writer: a bounded queue on the request path, batches in its own thread, a store that fails
(locked, full) costs records beyond the bound and never raises to the caller; bodies redacted
and capped."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Generator, Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest
from prometheus_client import CollectorRegistry

from levergate.config.request_log import RequestLogBodiesSettings, RequestLogSettings
from levergate.core.call import Call, Context
from levergate.core.reply import Completed
from levergate.layers.measure.recorder import Seen
from levergate.layers.measure.shadow_labels import ShadowLabel
from levergate.redact import Redactor
from levergate.requestlog import writer as writer_module
from levergate.requestlog.features import features_of_body, replay_text
from levergate.requestlog.query import LogFilter
from levergate.requestlog.row import Captured
from levergate.requestlog.store import LogStoreBusy, LogStoreError, PostgresLog, SqliteLog
from levergate.requestlog.writer import BodyText, LogMetrics, LogWriter, wait_seconds
from levergate.testing.metrics import sample_value
from tests.unit.requestlog.records import record
from tests.waiting import running, until

SECRET = "sk-upstream-secret-0123456789"  # noqa: S105 - a test value


def call(text: str = "hi") -> Call:
    body = {"model": "fast", "messages": [{"role": "user", "content": text}]}
    return Call(kind="chat", body=body, ctx=Context(request_id="r"), raw=orjson.dumps(body))


def writer(path: Path, **values: object) -> tuple[LogWriter, SqliteLog, LogMetrics]:
    settings = RequestLogSettings.model_validate(
        {"enabled": True, "store": {"timeout_seconds": 0.05}, **values}
    )
    store = SqliteLog(str(path), timeout_seconds=0.05)
    metrics = LogMetrics(CollectorRegistry())
    bodies = BodyText(settings.bodies, Redactor([SECRET]))
    return LogWriter(store, settings=settings, metrics=metrics, bodies=bodies), store, metrics


def hold_writes(store: SqliteLog) -> tuple[threading.Event, threading.Event]:
    """The store's writes held in its thread until `release` is set; `writing` is set as one
    begins (a locked or slow disk, on cue)."""
    writing, release = threading.Event(), threading.Event()
    write = store.write

    def held(rows: Sequence[tuple[Any, ...]]) -> None:
        writing.set()
        release.wait(30)
        write(rows)

    store.write = held  # type: ignore[method-assign]
    store.writing = busy  # type: ignore[method-assign]
    return writing, release


def busy(rows: Sequence[tuple[Any, ...]], *, at_once: int) -> Generator[None]:
    """`SqliteLog.writing` as when another process holds the database's write lock."""
    raise LogStoreBusy("database is locked")
    yield


def count(path: Path) -> int:
    reader = SqliteLog(str(path), timeout_seconds=1)
    try:
        return int(reader.summary(LogFilter())["requests"])
    finally:
        reader.close()


async def test_a_full_queue_drops_and_counts_instead_of_waiting(tmp_path: Path) -> None:
    log, _, metrics = writer(tmp_path / "log.db", max_queue=10)
    for n in range(15):
        log.observe(record(n), call(), Seen())
    assert sample_value(metrics.dropped, "queue_full") == 5
    assert sample_value(metrics.queued) == 10
    assert await log.flush()
    assert count(tmp_path / "log.db") == 10
    assert sample_value(metrics.written) == 10
    await log.aclose()


async def test_a_locked_store_keeps_the_batch_up_to_the_bound_then_writes_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "log.db"
    log, _, metrics = writer(path, max_queue=10, batch_size=5)
    for n in range(8):
        log.observe(record(n), call(), Seen())
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("PRAGMA journal_mode = WAL")
    holder.execute("BEGIN EXCLUSIVE")  # another process holds the file
    try:
        assert not await log.flush()  # the first batch failed and went back, nothing raised
        for n in range(8, 14):  # the queue fills meanwhile: past 10, counted and dropped
            log.observe(record(n), call(), Seen())
        assert sample_value(metrics.store_errors) == 1
        assert sample_value(metrics.dropped, "queue_full") == 4
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert await log.flush()
    assert count(path) == 10
    await log.aclose()


async def test_the_job_writes_in_batches_and_close_flushes_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    log, _, metrics = writer(path, batch_size=5, flush_seconds=30)
    async with running(log.run):
        for n in range(5):  # a whole batch wakes the job before flush_seconds
            log.observe(record(n), call(), Seen())
        await until(lambda: sample_value(metrics.written) == 5)
        log.observe(record(99), call(), Seen())
    await log.aclose()  # the last one, written on the way out
    assert count(path) == 6


async def test_the_job_writes_what_was_queued_when_it_began_and_leaves_later_arrivals(
    tmp_path: Path,
) -> None:
    """Under steady traffic the job must not chase the queue's tail (a write every few records):
    what arrives during a write waits for a full batch or `flush_seconds`; the close drains."""
    path = tmp_path / "log.db"
    log, store, metrics = writer(path, batch_size=5)
    writing, release = hold_writes(store)
    for n in range(3):
        log.observe(record(n), call(), Seen())
    flushing = asyncio.ensure_future(log.flush(drain=False))
    await until(writing.is_set)
    for n in range(3, 5):  # arrive while the first write is in the store's thread
        log.observe(record(n), call(), Seen())
    release.set()
    assert await flushing
    assert count(path) == 3
    assert sample_value(metrics.queued) == 2
    await log.aclose()  # the close drains what is left
    assert count(path) == 5


def sized_writes(store: SqliteLog) -> list[int]:
    """The rows of each write the store is given, in order, in its thread (`write`) or on the
    event loop (`writing`; the real write still runs)."""
    sizes: list[int] = []
    write, writing = store.write, store.writing

    def counted(rows: Sequence[tuple[Any, ...]]) -> None:
        sizes.append(len(rows))
        write(rows)

    def counted_now(rows: Sequence[tuple[Any, ...]], *, at_once: int) -> Generator[None]:
        yield from writing(rows, at_once=at_once)  # `LogStoreBusy`: `write` gets them
        sizes.append(len(rows))

    store.write = counted  # type: ignore[method-assign]
    store.writing = counted_now  # type: ignore[method-assign]
    return sizes


async def test_a_full_batch_wakes_the_job_for_full_batches_only(tmp_path: Path) -> None:
    """The records that arrive between a full batch's wake and the job's turn wait for the next
    batch (or the timer) instead of going to the store's thread as a batch of a few: at
    concurrency 16 that was a second hand-off after every full batch."""
    path = tmp_path / "log.db"
    log, store, metrics = writer(path, batch_size=5, flush_seconds=60)
    sizes = sized_writes(store)
    async with running(log.run):
        for n in range(7):  # the fifth wakes the job; two more before it runs
            log.observe(record(n), call(), Seen())
        await until(lambda: sample_value(metrics.written) >= 5)
        for n in range(7, 12):  # 2 + 5: the queue reaches a batch again
            log.observe(record(n), call(), Seen())
        await until(lambda: sample_value(metrics.written) >= 10)
    await log.aclose()  # the close drains the rest
    assert sizes == [5, 5, 2]
    assert count(path) == 12


async def test_the_timer_writes_a_part_batch(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    log, store, metrics = writer(path, batch_size=500, flush_seconds=0.01)
    sizes = sized_writes(store)
    async with running(log.run):
        for n in range(3):
            log.observe(record(n), call(), Seen())
        await until(lambda: sample_value(metrics.written) == 3)
    assert sizes == [3]
    await log.aclose()


async def test_a_queue_grown_past_a_batch_during_the_writes_wakes_the_job_again(
    tmp_path: Path,
) -> None:
    """Records arriving while the queue is already longer than a batch never make it exactly a
    batch long (what wakes the job): the job looks again when it is done."""
    path = tmp_path / "log.db"
    log, store, metrics = writer(path, batch_size=5, flush_seconds=60)
    writing, release = hold_writes(store)
    for n in range(12):  # two full batches queued before the job runs
        log.observe(record(n), call(), Seen())
    async with running(log.run):
        await until(writing.is_set)  # 7 left in the queue
        for n in range(12, 16):  # 7 -> 11: never exactly 5
            log.observe(record(n), call(), Seen())
        release.set()
        await until(lambda: sample_value(metrics.written) == 15)  # not after flush_seconds
        assert sample_value(metrics.queued) == 1
    await log.aclose()
    assert count(path) == 16


async def test_bodies_are_logged_where_enabled_redacted_and_capped(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    log, _, _ = writer(path, bodies={"models": ["fast"], "max_bytes": 256,
                                         "redact_patterns": [r"\d{4}-\d{4}"]})  # fmt: skip
    answer = Completed(orjson.dumps({"choices": [{"message": {"content": f"ok {SECRET}"}}]}))
    log.observe(record(1), call(f"card 1234-5678 key {SECRET}"), Seen(reply=answer))
    log.observe(record(2, model="other", alias="other"), call("not logged"), Seen())
    long_text = "word " * 200
    log.observe(record(3), call(long_text), Seen(reply=answer))
    assert await log.flush()
    reader = SqliteLog(str(path), timeout_seconds=1)
    records = {r["request_id"]: r for r in reader.page(LogFilter(), cursor=None, limit=10).records}
    reader.close()
    first = records["req-1"]
    assert SECRET not in first["request_body"]
    assert "1234-5678" not in first["request_body"]
    assert "[redacted]" in first["request_body"]
    assert first["answer_body"] == "ok [redacted]"
    assert records["req-2"]["request_body"] is None
    capped = records["req-3"]["request_body"]
    assert capped.endswith("bytes]")
    assert len(capped.encode()) < 256 + 40
    # The bodies' rows are the others' but for the bodies: the schema and the replay features
    # where they were.
    for n, text in ((1, f"card 1234-5678 key {SECRET}"), (2, "not logged"), (3, long_text)):
        assert records[f"req-{n}"]["schema"] == record(n).schema
        assert records[f"req-{n}"]["replay"] == features_of_body(
            call(text).body, kind="chat", model="fast"
        )
    await log.aclose()


def test_a_stream_answer_is_its_generated_text() -> None:
    chunks = [orjson.dumps({"choices": [{"delta": {"content": part}}]}) for part in ("a", "b")]
    texts = BodyText(RequestLogBodiesSettings(), Redactor())
    request, answer = texts.texts(Captured(None, {"model": "m"}, None, chunks))
    assert (request, answer) == ('{"model":"m"}', "ab")


def replays(path: Path) -> dict[str, Any]:
    reader = SqliteLog(str(path), timeout_seconds=1)
    try:
        page = reader.page(LogFilter(), cursor=None, limit=50)
        return {r["request_id"]: r["replay"] for r in page.records}
    finally:
        reader.close()


async def test_the_features_computed_when_queued_survive_a_failed_batch(tmp_path: Path) -> None:
    """Each record's replay features are in its row when it is queued (nothing of its body is
    held for the batch); a batch that fails and is retried keeps them. Every row's replay is
    its body's features."""
    path = tmp_path / "log.db"
    log, _, _ = writer(path)
    calls = [call(f"{n} " + "x" * 600) for n in range(3)]
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("PRAGMA journal_mode = WAL")
    holder.execute("BEGIN EXCLUSIVE")
    try:
        for n, c in enumerate(calls):
            log.observe(record(n), c, Seen())
        assert not await log.flush()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert len(log._queue) == 3  # back in the queue
    assert await log.flush()
    got = replays(path)
    await log.aclose()
    for n, c in enumerate(calls):
        assert got[f"req-{n}"] == features_of_body(c.body, kind="chat", model="fast")


async def test_a_body_that_cannot_be_featured_is_that_records_loss_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A body whose features fail (a bug, a body no one foresaw) drops its record, counted as
    `invalid`, and nothing else; one that is not JSON (a library caller's objects) is logged
    without replay features (not replayable)."""
    path = tmp_path / "log.db"
    log, _, metrics = writer(path)
    broken = call("broken")

    def failing(body: Any, **kw: Any) -> str | None:
        if body is broken.body:
            raise ValueError("a feature failed")
        return replay_text(body, **kw)

    monkeypatch.setattr(writer_module, "replay_text", failing)
    opaque = Call(kind="chat", body={**call("opaque").body, "top_p": object()},  # not JSON
                  ctx=Context(request_id="r"))  # fmt: skip
    log.observe(record(0), call("before"), Seen())
    log.observe(record(1), broken, Seen())
    log.observe(record(2), opaque, Seen())
    log.observe(record(3), call("after"), Seen())
    assert await log.flush()
    got = replays(path)
    await log.aclose()
    assert sample_value(metrics.dropped, "invalid") == 1
    assert set(got) == {"req-0", "req-2", "req-3"}
    assert got["req-2"] is None
    assert got["req-3"] == features_of_body(call("after").body, kind="chat", model="fast")


async def test_the_fingerprint_reuses_the_exact_caches_bytes_of_the_very_body(
    tmp_path: Path,
) -> None:
    """The canonical bytes the exact cache left on the trace (`Trace.canonical`) make the
    logged fingerprint when they are of the body logged (not computed again); of an equal but
    other body, they are not used."""
    path = tmp_path / "log.db"
    log, _, _ = writer(path)
    cached, other = call("hi"), call("hi")
    cached.ctx.trace.canonical = (cached.body, b"planted")
    other.ctx.trace.canonical = (dict(other.body), b"planted")
    log.observe(record(0), cached, Seen())
    log.observe(record(1), other, Seen())
    assert await log.flush()
    got = replays(path)
    await log.aclose()
    fresh = features_of_body(cached.body, kind="chat", model="fast")
    assert got["req-0"] == features_of_body(
        cached.body, kind="chat", model="fast", canonical=b"planted"
    )
    assert got["req-0"]["fp"] != fresh["fp"]
    assert got["req-1"] == fresh


def five_queued(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[LogWriter, LogMetrics]:
    """A writer with one full batch of 5 records queued, yielding to the loop after each row
    it builds (so a batch can be caught half turned into rows: their bodies are logged, what
    the batch turns into text)."""
    monkeypatch.setattr(writer_module, "TURN_SECONDS", 0.0)
    log, _, metrics = writer(path, batch_size=5, flush_seconds=30, bodies={"models": ["*"]})
    for n in range(5):
        log.observe(record(n), call(), Seen())
    return log, metrics


async def test_a_batch_the_stopped_job_was_building_is_written_on_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gateway stops its jobs before it closes the log: a batch taken off the queue and
    still being turned into rows then goes back to it, and the close writes it."""
    path = tmp_path / "log.db"
    log, metrics = five_queued(path, monkeypatch)
    job = asyncio.ensure_future(log.flush())
    for _ in range(3):  # the batch is off the queue, some rows built
        await asyncio.sleep(0)
    assert sample_value(metrics.queued) == 0
    job.cancel()
    with pytest.raises(asyncio.CancelledError):
        await job
    assert sample_value(metrics.queued) == 5
    await log.aclose()
    assert count(path) == 5
    assert sample_value(metrics.dropped, "queue_full") == 0


async def test_a_cancelled_close_still_writes_what_was_queued(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The closer cancelled while the final batch is turned into rows (a reload retiring the
    gateway as the server stops): the write is shielded and finishes, then the cancellation
    passes (before: the batch went back to the queue, nothing was written: 5 of 5 lost,
    uncounted)."""
    path = tmp_path / "log.db"
    log, metrics = five_queued(path, monkeypatch)
    closing = asyncio.ensure_future(log.aclose())
    for _ in range(3):  # the batch is off the queue, some rows built
        await asyncio.sleep(0)
    closing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await closing
    assert count(path) == 5
    assert sample_value(metrics.written) == 5
    log.observe(record(6), call(), Seen())  # after the close: dropped, counted
    assert sample_value(metrics.dropped, "queue_full") == 1


async def test_what_the_close_cannot_write_is_counted_labels_too(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    log, _, metrics = writer(path)
    for n in range(3):
        log.observe(record(n), call(), Seen())
    for n in range(2):
        log.labelled(ShadowLabel(
            request_id=f"req-{n}", layer="route", name="auto", cheap="small", strong="large",
            result="agree", compare="normalized", judge_score=None, prompt="q",
            cheap_text="a", strong_text="a", tenant="t", feature="f",
        ))  # fmt: skip
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("PRAGMA journal_mode = WAL")
    holder.execute("BEGIN EXCLUSIVE")  # the store cannot be written at the close
    try:
        await log.aclose()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert sample_value(metrics.dropped, "store_error") == 5


def _held(value: object) -> list[object]:
    """Every object reachable from `value` through tuples, lists and dicts (what a queued item
    holds)."""
    found, todo = [], [value]
    while todo:
        item = todo.pop()
        found.append(item)
        if isinstance(item, tuple | list):
            todo.extend(item)
        elif isinstance(item, dict):
            todo.extend(item.values())
    return found


async def test_the_queue_keeps_no_record_or_call_until_the_batch(tmp_path: Path) -> None:
    """A queued request is its complete row (its replay features in it), not the record, the
    call or the body's dicts and lists: those (the request's whole object graph) die when the
    request ends instead of living on for the batch."""
    path = tmp_path / "log.db"
    log, _, _ = writer(path)
    for n in range(3):
        log.observe(record(n), call(f"{n}"), Seen())
    kinds = {type(held) for item in log._queue for held in _held(item)}
    assert not kinds & {Call, Context, type(record(0)), Seen, dict, list}
    assert await log.flush()
    await log.aclose()
    assert count(path) == 3


@pytest.mark.parametrize("wait_ms", [0, 1, 100])
async def test_the_loop_waits_for_a_write_at_most_write_wait_ms(
    tmp_path: Path, wait_ms: float
) -> None:
    """The loop waits for a batch's write in the store's thread up to `write_wait_ms`, then
    serves other work while the write goes on: a write held in the thread (a locked disk)
    never holds the loop (with an unbounded wait this test would hang), and the batch is
    written once the write is let go."""
    path = tmp_path / "log.db"
    log, store, _ = writer(path, batch_size=5, write_wait_ms=wait_ms)
    writing, release = hold_writes(store)
    for n in range(3):
        log.observe(record(n), call(), Seen())
    flushing = asyncio.ensure_future(log.flush())
    turns = 0
    while not writing.is_set() or turns < 3:  # the loop turns while the write is held
        await asyncio.sleep(0)
        turns += 1
    assert not flushing.done()
    release.set()
    assert await flushing
    await log.aclose()
    assert count(path) == 3


async def connected(log: LogWriter, path: Path) -> None:
    """A first record written: the store's thread connects (the schema), as the job's first
    batch does."""
    log.observe(record(1000), call(), Seen())
    assert await log.flush()
    assert count(path) == 1


async def test_once_connected_batches_are_written_on_the_loop_not_in_the_thread(
    tmp_path: Path,
) -> None:
    path = tmp_path / "log.db"
    log, store, metrics = writer(path, batch_size=5)
    await connected(log, path)
    in_thread = sized_writes(store)
    store.write = lambda rows: pytest.fail("written in the thread")  # type: ignore[method-assign]
    for n in range(12):
        log.observe(record(n), call(), Seen())
    assert await log.flush()
    assert in_thread == [5, 5, 2]  # each batch through `writing`
    assert count(path) == 13
    assert sample_value(metrics.written) == 13
    await log.aclose()


async def test_a_database_locked_elsewhere_is_written_by_the_thread_once_free(
    tmp_path: Path,
) -> None:
    """The loop never waits for a lock: `writing` gives up at once (busy timeout 0), and the
    thread writes the batch, waiting for the lock up to the store's timeout."""
    path = tmp_path / "log.db"
    log, store, _ = writer(path, batch_size=5)
    await connected(log, path)
    store._busy_ms = 30_000  # the thread's wait outlasts the holder's
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process writing the file
    try:
        for n in range(3):
            log.observe(record(n), call(), Seen())
        flushing = asyncio.ensure_future(log.flush())
        await until(lambda: log._thread_work is not None and not log._thread_work.done())
        assert not flushing.done()  # the thread waits on the lock; the loop goes on
    finally:
        holder.execute("COMMIT")
        holder.close()
    assert await flushing
    assert count(path) == 4
    await log.aclose()


async def test_a_write_cancelled_on_the_loop_is_rolled_back_and_written_once_on_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer_module, "LOOP_ROWS", 1)  # a statement and a turn a row
    path = tmp_path / "log.db"
    log, store, metrics = writer(path, batch_size=5)
    await connected(log, path)
    for n in range(5):
        log.observe(record(n), call(), Seen())
    job = asyncio.ensure_future(log.flush())
    while not (store._conn is not None and store._conn.in_transaction):
        await asyncio.sleep(0)
    await asyncio.sleep(0)  # a row or two inserted, not committed
    job.cancel()
    with pytest.raises(asyncio.CancelledError):
        await job
    assert not store._conn.in_transaction
    assert count(path) == 1  # rolled back
    assert sample_value(metrics.queued) == 5  # and back in the queue
    await log.aclose()
    reader = sqlite3.connect(path)
    try:
        ids = [row[0] for row in reader.execute("SELECT request_id FROM lg_requests")]
    finally:
        reader.close()
    assert len(ids) == len(set(ids)) == 6


def in_database_file(path: Path) -> int:
    """The records the database file holds, its WAL left out (what checkpoints copied)."""
    reader = sqlite3.connect(f"file:{path}?immutable=1", uri=True)
    try:
        return int(reader.execute("SELECT count(*) FROM lg_requests").fetchone()[0])
    finally:
        reader.close()


@pytest.mark.parametrize("every", [5, 10_000])
async def test_loop_writes_are_checkpointed_in_the_thread_every_checkpoint_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, every: int
) -> None:
    """Writing on the loop turns SQLite's automatic checkpoints off (a checkpoint syncs the
    disk): the writer runs them in its thread every `CHECKPOINT_ROWS` rows."""
    monkeypatch.setattr(writer_module, "CHECKPOINT_ROWS", every)
    path = tmp_path / "log.db"
    log, store, _ = writer(path, batch_size=5)
    await connected(log, path)
    assert store._conn is not None
    store._conn.execute("PRAGMA wal_autocheckpoint = 1")  # SQLite's: at every commit, if on
    store.checkpoint()
    before = in_database_file(path)
    for n in range(5):
        log.observe(record(n), call(), Seen())
    assert await log.flush()
    assert in_database_file(path) == (before + 5 if every == 5 else before)
    assert count(path) == 6
    await log.aclose()


def test_the_loop_waits_for_sqlites_thread_by_default_not_for_postgresqls() -> None:
    sqlite = SqliteLog("unused.db", timeout_seconds=1)
    postgres = PostgresLog("postgresql://127.0.0.1:1/none", timeout_seconds=1)
    assert wait_seconds(None, sqlite) == writer_module.SQLITE_WAIT_MS / 1000 > 0
    assert wait_seconds(None, postgres) == 0
    assert wait_seconds(0, sqlite) == 0  # set: as set, whatever the store
    assert wait_seconds(25, postgres) == 0.025


async def test_rows_the_thread_writes_count_toward_the_checkpoint_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once `writing` turned SQLite's automatic checkpoints off, the thread's writes (the file
    locked elsewhere meanwhile: another worker's writer) would otherwise grow the WAL unseen."""
    monkeypatch.setattr(writer_module, "CHECKPOINT_ROWS", 10)
    path = tmp_path / "log.db"
    log, store, _ = writer(path, batch_size=5)
    await connected(log, path)  # 1 row, in the thread
    store.checkpoint()  # the schema and that row in the file
    for n in range(5):  # on the loop: 6 rows, no checkpoint yet
        log.observe(record(n), call(), Seen())
    assert await log.flush()
    assert in_database_file(path) == 1
    store.writing = busy  # type: ignore[method-assign]  # locked: the thread writes the next
    for n in range(5, 10):
        log.observe(record(n), call(), Seen())
    assert await log.flush()  # 11 rows: the checkpoint
    assert in_database_file(path) == 11
    await log.aclose()


async def test_a_running_checkpoint_holds_up_neither_the_loops_writes_nor_a_second_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The checkpoint runs in a thread and on a connection of its own, not waited for: while
    one runs, the job's writes go on on the loop (none through the store's thread), no second
    starts, and the rows written meanwhile count toward the next."""
    monkeypatch.setattr(writer_module, "CHECKPOINT_ROWS", 5)
    path = tmp_path / "log.db"
    log, store, metrics = writer(path, batch_size=5)
    await connected(log, path)  # 1 row, in the thread
    store.checkpoint()  # the schema and that row in the file
    release, started = threading.Event(), []
    checkpoint, thread_write = store.checkpoint, store.write

    def held() -> None:
        started.append(threading.current_thread().name)
        assert release.wait(10)
        checkpoint()

    def no_thread_write(rows: Sequence[tuple[Any, ...]]) -> None:
        raise AssertionError("written in the store's thread")

    store.checkpoint = held  # type: ignore[method-assign]
    store.write = no_thread_write  # type: ignore[method-assign]
    try:
        for batch in range(3):  # 6 rows, then 5 and 5 while the first checkpoint is held
            for n in range(5):
                log.observe(record(10 * batch + n), call(), Seen())
            assert await log.flush(drain=False, partial=False)
            await until(lambda: len(started) == 1)
        assert count(path) == 16
        assert in_database_file(path) == 1
        assert len(started) == 1
        assert started[0].startswith("levergate-log-checkpoint")
    finally:
        release.set()
        store.write = thread_write  # type: ignore[method-assign]
    assert await log.flush()  # a caller's flush waits for the checkpoint running
    assert in_database_file(path) == 16
    log.observe(record(99), call(), Seen())
    assert await log.flush()  # the 10 rows counted meanwhile and this one: the second
    assert len(started) == 2
    assert in_database_file(path) == 17
    assert sample_value(metrics.store_errors) == 0
    await log.aclose()


async def test_a_failed_checkpoint_is_counted_and_the_next_one_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer_module, "CHECKPOINT_ROWS", 5)
    path = tmp_path / "log.db"
    log, store, metrics = writer(path, batch_size=5)
    await connected(log, path)
    checkpoint, failures = store.checkpoint, [True]

    def flaky() -> None:
        if failures and failures.pop():
            raise LogStoreError("request log: disk I/O error")
        checkpoint()

    store.checkpoint = flaky  # type: ignore[method-assign]
    for batch in range(2):
        for n in range(5):
            log.observe(record(10 * batch + n), call(), Seen())
        assert await log.flush()
    assert sample_value(metrics.store_errors) == 1
    assert in_database_file(path) == 11
    await log.aclose()


async def test_records_are_held_and_their_rows_built_together(tmp_path: Path) -> None:
    """`observe` holds a record (counted queued) until `HELD` are held, then builds their rows
    together; the flush builds what is still held. Each row is its record's, features and all."""
    path = tmp_path / "log.db"
    log, _, metrics = writer(path)
    calls = [call(f"{n}") for n in range(writer_module.HELD + 3)]
    for n, c in enumerate(calls[: writer_module.HELD - 1]):
        log.observe(record(n), c, Seen())
    assert len(log._queue) == 0
    assert sample_value(metrics.queued) == writer_module.HELD - 1
    for n, c in enumerate(calls[writer_module.HELD - 1 :], writer_module.HELD - 1):
        log.observe(record(n), c, Seen())
    assert len(log._queue) == writer_module.HELD  # the first chunk's rows; three held
    assert sample_value(metrics.queued) == len(calls)
    assert await log.flush()
    got = replays(path)
    await log.aclose()
    assert got == {f"req-{n}": features_of_body(c.body, kind="chat", model="fast")
                   for n, c in enumerate(calls)}  # fmt: skip


async def test_large_requests_are_not_held_past_their_bytes(tmp_path: Path) -> None:
    """Records are held by count and by their requests' bytes (`HELD_BYTES`): a few large
    prompts are built at once rather than held 32 at a time."""
    log, _, _ = writer(tmp_path / "log.db")
    large = call("x" * (writer_module.HELD_BYTES // 2))
    log.observe(record(1), large, Seen())
    assert len(log._queue) == 0
    log.observe(record(2), large, Seen())  # past HELD_BYTES together
    assert len(log._queue) == 2
    assert log._held == []
    await log.aclose()


async def test_a_batch_smaller_than_a_chunk_is_not_held_past_it(tmp_path: Path) -> None:
    """With `batch_size` under `HELD`, a full batch is built and wakes the job at once."""
    log, _, _ = writer(tmp_path / "log.db", batch_size=5)
    for n in range(5):
        log.observe(record(n), call(), Seen())
    assert len(log._queue) == 5
    assert log._wake.is_set()
    await log.aclose()
