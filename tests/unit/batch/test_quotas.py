"""What a tenant holds in the job store (both backends), the quotas counted from it, the sweep
of expired files and orphaned temporary files, and a job store made before those columns."""

from __future__ import annotations

import asyncio
import fcntl
import os
import sqlite3
import time
from pathlib import Path

import psycopg
import pytest

from levergate.batch.files import Disk
from levergate.batch.model import FileRecord, Job
from levergate.batch.quotas import TEMP_GRACE_SECONDS, Quotas, Sweeper
from levergate.batch.store import Store
from levergate.batch.stores.postgres import PostgresStore
from levergate.batch.stores.sqlite import SqliteStore
from levergate.config import TenantQuotasSettings
from levergate.errors import PayloadTooLarge, QuotaExceeded
from levergate.testing import ManualClock
from tests.postgres_required import postgres_database


def job(job_id: str, *, tenant: str = "t", kind: str = "batch", size: int = 0) -> Job:
    return Job(id=job_id, tenant=tenant, status="validating", endpoint="/v1/chat/completions",
               input_file_id="f", created_at=0, expires_at=10**9, kind=kind,
               holds=size)  # fmt: skip


def file(
    file_id: str, *, tenant: str = "t", size: int = 100, expires: int | None = None
) -> FileRecord:
    return FileRecord(file_id, tenant, "in.jsonl", "batch", size, 0, 1, expires)


async def test_usage_counts_files_and_what_open_jobs_hold(store: Store) -> None:
    await store.add_file(file("f1", size=100))
    await store.add_file(file("f2", size=50))
    await store.add_file(file("f3", tenant="other", size=999))
    await store.add_job(job("batch_1", size=100))
    await store.add_job(job("areq_1", kind="async", size=7))
    done = job("batch_2", size=1000)
    await store.add_job(done)
    assert await store.save(done.moved("failed", now=1), expect="validating")  # holds nothing
    used = await store.usage(tenant="t")
    assert (used.files, used.bytes) == (2, 100 + 50 + 100 + 7)
    assert used.open_jobs == {"batch": 1, "async": 1}
    assert (await store.get_job("batch_1", tenant="t")) == job("batch_1", size=100)


async def test_expired_files_are_found_soonest_first(store: Store) -> None:
    await store.add_file(file("late", expires=300))
    await store.add_file(file("never"))
    await store.add_file(file("soon", expires=100))
    assert [f.id for f in await store.expired_files(now=200, limit=10)] == ["soon"]
    assert [f.id for f in await store.expired_files(now=300, limit=10)] == ["soon", "late"]
    assert (await store.get_file("late", tenant="t")) == file("late", expires=300)


async def test_quotas_refuse_naming_the_quota_per_tenant(store: Store) -> None:
    quotas = Quotas(settings=TenantQuotasSettings(stored_bytes=1000, files=2, queued_batches=1,
                                          pending_async_requests=1), store=store)  # fmt: skip
    await store.add_file(file("f1", size=300))
    async with quotas.upload("t") as meter:
        meter(400)
        with pytest.raises(PayloadTooLarge) as over:
            meter(301)  # 300 stored + 701 arriving
        assert over.value.code == "storage_quota_exceeded"
        assert "batch.quotas.stored_bytes" in over.value.message
        with pytest.raises(QuotaExceeded) as files:  # one file kept, one arriving
            async with quotas.upload("t"):
                pass
        assert files.value.code == "files_quota_exceeded"
        assert files.value.headers()["x-should-retry"] == "false"
        async with quotas.upload("other") as theirs:  # another tenant's room is its own
            theirs(999)
    async with quotas.upload("t") as meter:  # what arrived is counted no longer
        meter(700)
    await quotas.batch("t", size=300)
    await store.add_job(job("batch_1", size=300))
    with pytest.raises(QuotaExceeded) as queued:
        await quotas.batch("t", size=1)
    assert queued.value.code == "queued_batches_quota_exceeded"
    with pytest.raises(QuotaExceeded) as room:
        await quotas.async_request("t", size=401)  # 600 held
    assert room.value.code == "storage_quota_exceeded"
    await store.add_job(job("areq_1", kind="async", size=10))
    with pytest.raises(QuotaExceeded) as pending:
        await quotas.async_request("t", size=1)
    assert pending.value.code == "pending_async_requests_quota_exceeded"


async def test_an_upload_is_counted_again_with_what_landed_while_it_arrived(store: Store) -> None:
    quotas = Quotas(settings=TenantQuotasSettings(stored_bytes=1000), store=store)
    async with quotas.upload("t") as first:
        first(800)
        async with quotas.upload("t") as second:  # began when nothing was stored
            second(150)
            await quotas.landed("t")
            await store.add_file(file("f2", size=150))
        first(40)  # the meter still counts from its start: 840 of 1000
        await quotas.landed("t")  # 150 stored + 840: fits
        await store.add_file(file("f3", size=20))  # another replica's upload landed
        first(1)  # the meter does not see it
        with pytest.raises(PayloadTooLarge):
            await quotas.landed("t")  # 170 stored + 841


async def test_the_sweep_deletes_expired_files_and_orphaned_uploads(
    store: Store, tmp_path: Path
) -> None:
    disk = Disk(tmp_path / "files")
    clock = ManualClock(start=1000.0)
    for name, expires in (("gone", 1500), ("kept", 5000), ("forever", None)):
        await store.add_file(file(name, expires=expires))
        disk.path(name).parent.mkdir(parents=True, exist_ok=True)
        disk.path(name).write_bytes(b"{}\n")
    live = await disk.temp()  # an upload in flight: locked
    tmp = tmp_path / "files" / "tmp"
    orphan = tmp / "dead.part"
    orphan.write_bytes(b"half an upload")  # its writer died: nobody holds its lock
    young, stale = tmp / "young.new", tmp / "stale.new"  # being made; made by one that died
    young.write_bytes(b"")
    stale.write_bytes(b"")
    old = time.time() - 2 * TEMP_GRACE_SECONDS
    for path in (live.path, stale):
        os.utime(path, (old, old))
    sweeper = Sweeper(store=store, disk=disk, clock=clock, every=60)
    clock.advance(1000)
    assert await sweeper.sweep() == 1
    assert await store.get_file("gone", tenant="t") is None
    assert not disk.path("gone").exists()
    assert disk.path("kept").exists()
    assert disk.path("forever").exists()
    assert not orphan.exists()
    assert not stale.exists()
    assert live.path.exists()
    assert young.exists()
    await disk.drop(live)
    assert not live.path.exists()


def test_a_temporary_file_locked_by_another_process_is_not_swept(tmp_path: Path) -> None:
    disk = Disk(tmp_path)
    (tmp_path / "tmp").mkdir()
    path = tmp_path / "tmp" / "other.part"
    path.write_bytes(b"x")
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert asyncio.run(disk.sweep(older_than=TEMP_GRACE_SECONDS)) == 0  # another fd: blocked
    finally:
        os.close(fd)
    assert asyncio.run(disk.sweep(older_than=TEMP_GRACE_SECONDS)) == 1


# The schema of the first release, before files expired and jobs counted their bytes.
OLD_SQLITE = """
CREATE TABLE files (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE NOT NULL,
  tenant TEXT NOT NULL, filename TEXT NOT NULL, purpose TEXT NOT NULL, bytes INTEGER NOT NULL,
  created_at INTEGER NOT NULL, lines INTEGER NOT NULL);
CREATE TABLE jobs (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE NOT NULL,
  tenant TEXT NOT NULL, kind TEXT NOT NULL, status TEXT NOT NULL, created_at INTEGER NOT NULL,
  expires_at INTEGER NOT NULL, holder TEXT, lease_until REAL, data BLOB NOT NULL);
INSERT INTO files (id, tenant, filename, purpose, bytes, created_at, lines)
  VALUES ('f-old', 't', 'a.jsonl', 'batch', 10, 0, 1);
"""


async def test_a_store_made_before_the_new_columns_is_brought_up_to_date(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    with sqlite3.connect(path) as conn:
        conn.executescript(OLD_SQLITE)
    sqlite = SqliteStore(path, timeout=5)
    try:
        assert await sqlite.get_file("f-old", tenant="t") == FileRecord(
            "f-old", "t", "a.jsonl", "batch", 10, 0, 1, None)  # fmt: skip
        await sqlite.add_job(job("batch_1", size=5))
        assert (await sqlite.usage(tenant="t")).bytes == 15
    finally:
        await sqlite.aclose()
    async with postgres_database("levergate_quota_old") as dsn:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await conn.execute(
                "CREATE TABLE lg_files (seq BIGSERIAL PRIMARY KEY, id TEXT UNIQUE NOT NULL, "
                "tenant TEXT NOT NULL, filename TEXT NOT NULL, purpose TEXT NOT NULL, "
                "bytes BIGINT NOT NULL, created_at BIGINT NOT NULL, lines INTEGER NOT NULL)"
            )
            await conn.execute(
                "INSERT INTO lg_files (id, tenant, filename, purpose, bytes, created_at, lines) "
                "VALUES ('f-old', 't', 'a', 'batch', 10, 0, 1)"
            )
        pg = PostgresStore(dsn, timeout=5)
        try:
            found = await pg.get_file("f-old", tenant="t")
            assert found is not None
            assert found.expires_at is None
            assert (await pg.usage(tenant="t")).files == 1
        finally:
            await pg.aclose()
