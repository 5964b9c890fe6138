"""Tenants share the runner fairly: a tenant's line (or async request) is not queued behind
another tenant's flood, no tenant holds more than its share of the line slots, and job steps
of one tenant never hold another tenant's back. The real runner on real job stores; only the
line's execution is a stand-in (it records what ran, in order)."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from levergate.batch.files import Disk
from levergate.batch.model import Claim, Job, LineRow
from levergate.batch.runner import Done, Runner
from levergate.batch.service import WallClock
from levergate.batch.store import Store
from levergate.batch.stores.sqlite import SqliteStore
from levergate.config import RequestLimitsSettings
from levergate.config.batch import BatchSettings
from levergate.core.interactive import Interactive

NOW = 1000.0


async def queued(store: Store, job_id: str, tenant: str, lines: int) -> None:
    job = Job(id=job_id, tenant=tenant, status="in_progress", endpoint="/v1/chat/completions",
              input_file_id="f", created_at=0, expires_at=10**10)  # fmt: skip
    await store.add_lines(job_id, [LineRow(i, f"c{i}", b"{}") for i in range(lines)])
    await store.add_job(job)


async def test_claimable_tenants_and_claims_by_tenant(store: Store) -> None:
    await queued(store, "batch_a", "a", 5)
    await queued(store, "batch_b", "b", 2)
    assert await store.claimable(now=NOW) == ["a", "b"]
    got = await store.claim(holder="h", now=NOW, until=NOW + 30, limit=10, tenant="b")
    assert [(c.tenant, c.idx) for c in got] == [("b", 0), ("b", 1)]
    assert await store.claimable(now=NOW) == ["a"]


async def test_a_lease_avoids_the_busy_tenants_while_another_has_work(
    store: Store,
) -> None:
    for job_id, tenant in (("batch_1", "a"), ("batch_2", "a"), ("batch_3", "b")):
        job = Job(id=job_id, tenant=tenant, status="validating", endpoint="/v1/chat/completions",
                  input_file_id="f", created_at=0, expires_at=10**10)  # fmt: skip
        await store.add_job(job)
    first = await store.lease(holder="h", now=NOW, until=NOW + 30, avoid=["a"])
    assert first is not None
    assert first.id == "batch_3"
    second = await store.lease(holder="h", now=NOW, until=NOW + 30, avoid=["a", "b"])
    assert second is not None
    assert second.id == "batch_1"


class Recorder:
    """Runs a line by waiting for a turn of the event loop; notes what ran and how many of
    each tenant's lines were in flight at most."""

    def __init__(self) -> None:
        self.started: list[tuple[str, str]] = []
        self.now: Counter[str] = Counter()
        self.most: Counter[str] = Counter()
        self.done: set[str] = set()

    async def __call__(self, claim: Claim) -> Done:
        self.started.append((claim.tenant, claim.job_id))
        self.now[claim.tenant] += 1
        self.most[claim.tenant] = max(self.most[claim.tenant], self.now[claim.tenant])
        await asyncio.sleep(0.002)
        self.now[claim.tenant] -= 1
        self.done.add(claim.job_id)
        return Done(ok=True, result=b"{}")


@pytest.fixture
async def sqlite(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    found = SqliteStore(tmp_path / "fair.sqlite3", timeout=5)
    yield found
    await found.aclose()


async def run_until(runner: Runner, check: Callable[[], bool], *, then: float = 0.0) -> None:
    """Run `runner` until `check` holds, and `then` seconds more."""
    task = asyncio.create_task(runner.run())
    try:
        for _ in range(2000):
            if check():
                await asyncio.sleep(then)
                return
            await asyncio.sleep(0.01)
        raise AssertionError("the runner never got there")
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


def runner_for(jobs: SqliteStore, tmp: Path, execute: Recorder, **over: object) -> Runner:
    settings = BatchSettings.model_validate({"enabled": True, "dir": str(tmp / "files"),
                                     "poll_seconds": 0.02, **over})  # fmt: skip
    return Runner(
        settings=settings,
        limits=RequestLimitsSettings(),
        store=jobs,
        disk=Disk(settings.dir),
        execute=execute,
        clock=WallClock(),
    )


async def test_a_tenants_single_line_is_not_queued_behind_anothers_flood(
    sqlite: SqliteStore, tmp_path: Path
) -> None:
    await queued(sqlite, "batch_flood", "a", 400)
    await queued(sqlite, "areq_small", "b", 1)
    execute = Recorder()
    runner = runner_for(sqlite, tmp_path, execute, concurrency=8)
    await run_until(runner, lambda: "areq_small" in execute.done)
    # Oldest batch first ran all 400 of tenant a's lines before b's; now b's goes in the first
    # round of claims.
    position = execute.started.index(("b", "areq_small"))
    assert position < 8, position


async def test_no_tenant_holds_more_than_its_share_of_the_line_slots(
    sqlite: SqliteStore, tmp_path: Path
) -> None:
    await queued(sqlite, "batch_alone", "a", 60)
    execute = Recorder()
    runner = runner_for(sqlite, tmp_path, execute, concurrency=8, max_tenant_share=0.5)
    await run_until(runner, lambda: len(execute.started) == 60)
    assert execute.most["a"] == 4


async def test_two_busy_tenants_share_the_slots_evenly(sqlite: SqliteStore, tmp_path: Path) -> None:
    await queued(sqlite, "batch_a", "a", 200)
    await queued(sqlite, "batch_b", "b", 200)
    execute = Recorder()
    runner = runner_for(sqlite, tmp_path, execute, concurrency=8, max_tenant_share=1.0)
    await run_until(runner, lambda: len(execute.started) >= 100)
    firsts = Counter(tenant for tenant, _ in execute.started[:100])
    assert abs(firsts["a"] - firsts["b"]) <= 8, firsts


async def test_one_tenants_slow_job_steps_leave_workers_for_another_tenant(
    sqlite: SqliteStore, tmp_path: Path
) -> None:
    stepped: list[str] = []
    never = asyncio.Event()

    async def step(job: Job, runner: Runner) -> bool | None:
        del runner
        stepped.append(job.id)
        if job.tenant == "a":
            await never.wait()  # a huge input file, a hung provider...
        return True

    for n in range(6):
        await sqlite.add_job(Job(id=f"batch_a{n}", tenant="a", status="validating",
                                 endpoint="/v1/chat/completions", input_file_id="f",
                                 created_at=0, expires_at=10**10))  # fmt: skip
    await sqlite.add_job(Job(id="batch_b", tenant="b", status="validating",
                             endpoint="/v1/chat/completions", input_file_id="f", created_at=0,
                             expires_at=10**10))  # fmt: skip
    runner = runner_for(sqlite, tmp_path, Recorder(), job_workers=4)
    runner.steps.append(step)
    await run_until(runner, lambda: "batch_b" in stepped, then=0.3)  # 15 polls more
    assert sum(job.startswith("batch_a") for job in stepped) == 2  # half the workers


class Held(Recorder):
    """A line that runs until it is let go: what is in flight stays in flight."""

    def __init__(self) -> None:
        super().__init__()
        self.go = asyncio.Event()

    async def __call__(self, claim: Claim) -> Done:
        self.started.append((claim.tenant, claim.job_id))
        self.now[claim.tenant] += 1
        await self.go.wait()
        self.now[claim.tenant] -= 1
        return Done(ok=True, result=b"{}")


async def test_the_runner_keeps_fewer_lines_in_flight_while_client_requests_are(
    sqlite: SqliteStore, tmp_path: Path
) -> None:
    """Interactive traffic first: with a client request in flight the runner claims up to its
    yielded share of the slots and no more, and takes them all once the last one ends."""
    await queued(sqlite, "batch_a", "a", 100)
    await queued(sqlite, "batch_b", "b", 100)
    execute, interactive = Held(), Interactive()
    settings = BatchSettings.model_validate(
        {"enabled": True, "dir": str(tmp_path / "files"), "poll_seconds": 0.02,
         "concurrency": 32, "max_tenant_share": 1.0, "share_while_interactive": 0.125}
    )  # fmt: skip
    runner = Runner(settings=settings, limits=RequestLimitsSettings(), store=sqlite,
                    disk=Disk(settings.dir), execute=execute, clock=WallClock(),
                    interactive=interactive)  # fmt: skip
    with interactive.serving():
        task = asyncio.create_task(runner.run())
        try:
            await run_while(lambda: len(execute.started) < 4)
            for _ in range(20):  # the runner polls every 0.02 s: it had time to claim more
                await asyncio.sleep(0.01)
            assert len(execute.started) == 4  # 32 x 0.125
            with interactive.serving():
                pass  # another client request came and went: one is still in flight
            await asyncio.sleep(0.1)
            assert len(execute.started) == 4
        except BaseException:
            task.cancel()
            raise
    # The last client request ended: the full concurrency again.
    try:
        await run_while(lambda: len(execute.started) < 32)
        await asyncio.sleep(0.1)
        assert len(execute.started) == 32
    finally:
        execute.go.set()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def run_while(waiting: Callable[[], bool]) -> None:
    for _ in range(2000):
        if not waiting():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("it never got there")


class Asked(SqliteStore):
    """The real store, counting how often the runner asks which tenants have lines waiting."""

    asked = 0

    async def claimable(self, *, now: float) -> list[str]:
        self.asked += 1
        return await super().claimable(now=now)


async def test_a_freed_slot_is_refilled_without_asking_again_who_is_waiting(
    tmp_path: Path,
) -> None:
    """Lines finishing one at a time free one slot at a time (while client requests are in
    flight, a few slots are all there are: the soak, issue 20): each refill is one claim, the
    waiting tenants remembered while claims get what they ask for — and asked again once one
    comes back short, so a tenant that runs out hands its slots on at once."""
    jobs = Asked(tmp_path / "asked.sqlite3", timeout=5)
    try:
        await queued(jobs, "batch_a", "a", 60)
        await queued(jobs, "batch_b", "b", 3)
        execute = Recorder()
        runner = runner_for(jobs, tmp_path, execute, concurrency=4, max_tenant_share=1.0,
                            poll_seconds=30.0)  # fmt: skip
        await run_until(runner, lambda: len(execute.started) == 63)
        assert execute.started.index(("b", "batch_b")) < 4  # b's lines went in the first round
        assert jobs.asked <= 6, jobs.asked  # asked at each refill, it was 38
    finally:
        await jobs.aclose()
