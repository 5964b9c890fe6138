"""The request log's store failing under a gateway that keeps answering (issue 23, "Bad input"):
its SQLite file locked by another process, and its PostgreSQL (from `stores`) restarted under
it. Every request is answered; what the log could not keep is counted, none is lost silently;
a restarted PostgreSQL is reconnected and the queue written."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, closing
from pathlib import Path
from typing import Any

import httpx
import psycopg

from levergate.app import build_gateway
from levergate.config import Settings
from levergate.gateway import Gateway
from levergate.requestlog.extension import log_of
from levergate.server.transport import GatewayTransport
from levergate.simulator import SimSettings, run_simulator
from levergate.testing.metrics import sample_value
from tests.postgres_required import postgres_database

BODY = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


@asynccontextmanager
async def gateway(**log: Any) -> AsyncIterator[tuple[Gateway, httpx.AsyncClient]]:
    async with run_simulator(SimSettings(port=0)) as sim:
        stores = log.pop("stores", {})
        settings = Settings.for_upstream(sim.base_url, stores=stores, request_log={
            "enabled": True, "flush_seconds": 0.05, **log})  # fmt: skip
        async with build_gateway(settings) as gw, httpx.AsyncClient(
            transport=GatewayTransport(gw), base_url="http://levergate/v1"
        ) as http:  # fmt: skip
            yield gw, http


def counts(gw: Gateway) -> tuple[float, float, float]:
    """Written, dropped (every reason but bodies), store errors."""
    found = log_of(gw.extensions)
    assert found is not None
    m = found.writer._m
    dropped = sum(sample_value(m.dropped, r) for r in ("queue_full", "store_error", "invalid"))
    return sample_value(m.written), dropped, sample_value(m.store_errors)


async def polled(condition: Callable[[], bool | Awaitable[bool]], tries: int = 300) -> None:
    for _ in range(tries):
        found = condition()
        if await found if not isinstance(found, bool) else found:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the condition never held")


async def test_a_locked_log_file_drops_and_counts_never_fails_a_request(tmp_path: Path) -> None:
    path = tmp_path / "requests.sqlite3"
    store = {"sqlite_path": str(path), "timeout_seconds": 0.05}
    async with gateway(max_queue=10, batch_size=5, store=store) as (gw, http):
        await (await http.post("/chat/completions", json=BODY)).aread()
        await polled(lambda: counts(gw)[0] == 1)  # the file exists, one record in it
        holder = sqlite3.connect(path, isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")  # another process holds the file
        try:
            answers = [await http.post("/chat/completions", json=BODY) for _ in range(40)]
            assert [a.status_code for a in answers] == [200] * 40
            await polled(lambda: counts(gw)[2] >= 1)
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        await polled(lambda: sum(counts(gw)[:2]) == 41)  # written + dropped: every record
    written, dropped, errors = counts(gw)
    assert dropped >= 40 - 10 - 5  # past the queue's bound (and one batch in hand)
    assert errors >= 1
    reader = sqlite3.connect(path)
    assert reader.execute("SELECT COUNT(*) FROM lg_requests").fetchone()[0] == written
    reader.close()


async def test_a_log_file_deleted_under_the_gateway_is_made_anew(tmp_path: Path) -> None:
    # Until 2026-12 the gateway wrote on into the unlinked file: `written` counted every
    # record, none could be read, and all were gone at the next start.
    path = tmp_path / "requests.sqlite3"
    store = {"sqlite_path": str(path)}
    async with gateway(store=store) as (gw, http):
        await (await http.post("/chat/completions", json=BODY)).aread()
        await polled(lambda: counts(gw)[0] == 1)
        for name in ("requests.sqlite3", "requests.sqlite3-wal", "requests.sqlite3-shm"):
            (tmp_path / name).unlink()
        answers = [await http.post("/chat/completions", json=BODY) for _ in range(5)]
        assert [a.status_code for a in answers] == [200] * 5
        await polled(lambda: counts(gw)[2] >= 1)  # their batch found the file gone, kept them

        def on_disk() -> int:
            if not path.exists():
                return 0
            try:
                with closing(sqlite3.connect(path)) as reader:
                    return int(reader.execute("SELECT COUNT(*) FROM lg_requests").fetchone()[0])
            except sqlite3.OperationalError:  # made, its table not yet
                return 0

        await polled(lambda: on_disk() >= 5)


async def test_a_restarted_postgres_is_reconnected_and_the_queue_written() -> None:
    async with postgres_database("levergate_log_e2e") as dsn:
        async with gateway(stores={"default": {"postgres_dsn": dsn}}) as (gw, http):
            for _ in range(5):
                await (await http.post("/chat/completions", json=BODY)).aread()
            await polled(lambda: counts(gw)[0] == 5)
            async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as admin:
                await admin.execute(  # what a restart does to the log's connection
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            answers = [await http.post("/chat/completions", json=BODY) for _ in range(10)]
            assert [a.status_code for a in answers] == [200] * 10
            await polled(lambda: counts(gw)[0] == 15)
            _, dropped, errors = counts(gw)
            assert (dropped, errors) == (0, 1)  # the batch after the restart failed once
        async with await psycopg.AsyncConnection.connect(dsn) as check:
            found = await (await check.execute("SELECT COUNT(*) FROM lg_requests")).fetchone()
            assert found == (15,)
