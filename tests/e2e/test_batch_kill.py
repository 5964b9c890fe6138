"""A gateway killed with SIGKILL mid-batch resumes with zero lost lines: 8 kills at random
moments of a real `levergate serve` process (SQLite), then the same with two processes sharing
PostgreSQL (one killed at a time, the other takes over its leases). Duplicated upstream calls
are bounded by the lines in flight at each crash: kills x concurrency. The long version (more
kills, more lines) is benchmarks/batch_kill.py."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from levergate.simulator import LatencySettings, SimHandle, SimSettings, run_simulator
from levergate.testing.batch_crash import (
    Gateway,
    Record,
    check,
    finish,
    kill_loop,
    requests,
    submit,
    write_config,
)
from levergate.testing.ports import free_port
from tests.postgres_required import postgres_database

KILLS = 8
CONCURRENCY = 4
pytestmark = pytest.mark.timeout(240)


@pytest.fixture
async def slow_sim() -> AsyncIterator[SimHandle]:
    # 60 ms a request, 4 at a time: 300 lines take ~4.5 s of serving, outlasting the kills.
    async with run_simulator(SimSettings(port=0, latency=LatencySettings(ttft_ms=60.0))) as handle:
        yield handle


def upstream_calls(sim: SimHandle) -> int:
    return sum(sim.simulator.stats.requests.values())


async def test_sqlite_gateway_killed_repeatedly_loses_no_line(
    slow_sim: SimHandle, tmp_path: Path
) -> None:
    port = free_port()
    store = {"backend": "sqlite", "sqlite_path": str(tmp_path / "batch.sqlite3")}
    config = write_config(
        tmp_path / "gw.yaml",
        sim_url=slow_sim.base_url,
        port=port,
        store=store,
        files=tmp_path / "files",
        concurrency=CONCURRENCY,
    )
    gateway = Gateway(config, port, tmp_path / "gw.log")
    lines = requests(300)
    record = Record()
    await gateway.start()
    try:
        batch_id = await submit(gateway.url, lines)
        await kill_loop(
            [gateway], batch_id=batch_id, kills=KILLS, rng=random.Random(14), record=record
        )
        batch, found = await finish(gateway.url, batch_id)
    finally:
        gateway.stop()
    check(lines, found, record)
    assert batch.status == "completed"
    assert record.kills == KILLS
    assert record.kills_mid_batch >= KILLS // 2, record
    assert (record.lost, record.duplicated_in_output, record.mismatched) == (0, 0, 0), record
    assert batch.request_counts.completed == len(lines)
    assert len(lines) <= upstream_calls(slow_sim) <= len(lines) + KILLS * CONCURRENCY


async def test_two_gateways_on_postgres_share_a_batch_and_survive_kills(
    slow_sim: SimHandle, tmp_path: Path
) -> None:
    async with postgres_database("levergate_batch_kill") as dsn:
        # Batch jobs (and every other piece of shared state) in the one `stores.default`.
        store: dict[str, Any] = {}
        gateways = []
        for name in ("a", "b"):
            port = free_port()
            config = write_config(
                tmp_path / f"{name}.yaml",
                sim_url=slow_sim.base_url,
                port=port,
                store=store,
                files=tmp_path / "files",
                concurrency=CONCURRENCY,
                stores={"default": {"postgres_dsn": dsn}},
            )
            gateways.append(Gateway(config, port, tmp_path / f"{name}.log"))
        lines = requests(300)
        record = Record()
        try:
            for gateway in gateways:
                await gateway.start()
            batch_id = await submit(gateways[0].url, lines)
            await kill_loop(
                gateways, batch_id=batch_id, kills=KILLS, rng=random.Random(15), record=record
            )
            # The last word goes to one process alone: the other's leases must pass to it.
            gateways[1].kill()
            batch, found = await finish(gateways[0].url, batch_id)
        finally:
            for gateway in gateways:
                gateway.stop()
    check(lines, found, record)
    assert batch.status == "completed"
    assert (record.lost, record.duplicated_in_output, record.mismatched) == (0, 0, 0), record
    assert len(lines) <= upstream_calls(slow_sim) <= len(lines) + (KILLS + 1) * CONCURRENCY
