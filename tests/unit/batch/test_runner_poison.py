"""Nothing one batch holds stops the runner for the others (issue 20, item 1): a batch line
nested 300 deep crashed the shared runner on every start (orjson writes at most 254 levels),
every tenant's batches stayed `validating`, and cancelling did not help.

The runner here is the real one over the real stores (SQLite, and PostgreSQL when it answers),
on the wall clock with short polls; only the line's call through the pipeline is a stand-in.
Each test runs a good batch beside the poison one: it must complete, and the runner must still
be running at the end."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest

from levergate.batch.files import Disk
from levergate.batch.lines import output_line
from levergate.batch.model import Claim, FileRecord, Job, LineRow
from levergate.batch.runner import Done, Later, Runner, Step
from levergate.batch.service import WallClock
from levergate.batch.store import Store
from levergate.config import RequestLimitsSettings
from levergate.config.batch import BatchSettings

SETTINGS = BatchSettings(enabled=True, poll_seconds=0.01, retry_seconds=0.01, lease_seconds=30,
                 max_attempts=3, max_job_attempts=3)  # fmt: skip
Execute = Callable[[Claim], Awaitable[Done | Later]]


async def answered(claim: Claim) -> Done:
    body = {"echo": orjson.loads(claim.request)["messages"][0]["content"]}
    return Done(ok=True, result=output_line(claim.custom_id, request_id="r", status=200,
                                            body=body, error=None))  # fmt: skip


def body(custom_id: str) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": custom_id}]}


def line(custom_id: str) -> bytes:
    return orjson.dumps({"custom_id": custom_id, "method": "POST",
                         "url": "/v1/chat/completions", "body": body(custom_id)})  # fmt: skip


def deep_line(custom_id: str, levels: int) -> bytes:
    """A line nested `levels` deep, as no serializer writes it: text."""
    deep = b'{"d":' * (levels - 6) + b"{}" + b"}" * (levels - 6)
    head = line(custom_id).removesuffix(b"}]}}")
    return head + b'}],"tools":[{"type":"function","function":{"name":"f","parameters":' + \
        deep + b"}}]}}"  # fmt: skip


async def add_batch(store: Store, disk: Disk, job_id: str, lines: Sequence[bytes]) -> None:
    """A batch whose input file is already on disk and recorded (as an upload before the
    depth bound existed left it: nothing scanned it since)."""
    file_id = f"file-{job_id}"
    path = disk.path(file_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(item + b"\n" for item in lines))
    await store.add_file(FileRecord(file_id, "t", "in.jsonl", "batch", path.stat().st_size, 0,
                                    len(lines)))  # fmt: skip
    now = int(time.time())
    await store.add_job(Job(id=job_id, tenant="t", status="validating",
                            endpoint="/v1/chat/completions", input_file_id=file_id,
                            created_at=now, expires_at=now + 3600))  # fmt: skip


async def ended(store: Store, job_id: str, task: asyncio.Task[None]) -> Job:
    status = None
    for _ in range(1000):
        job = await store.get_job(job_id, tenant=None)
        assert job is not None
        if job.status in ("completed", "failed", "cancelled"):
            return job
        status = job.status
        assert not task.done(), task.exception() if not task.cancelled() else "cancelled"
        await asyncio.sleep(0.01)
    raise AssertionError(f"{job_id} never ended: {status}")


async def results(store: Store, job_id: str) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for ok in (True, False):
        for _, raw in await store.results(job_id, ok=ok, after=-1, limit=100):
            item = orjson.loads(raw)
            found[item["custom_id"]] = item
    return found


Start = Callable[..., asyncio.Task[None]]


@pytest.fixture
async def run(store: Store, tmp_path: Path) -> AsyncIterator[Start]:
    """Start a runner (as the supervisor would); its task, cancelled at the end."""
    tasks: list[asyncio.Task[None]] = []

    def start(*, execute: Execute = answered, steps: Sequence[Step] = ()) -> asyncio.Task[None]:
        runner = Runner(settings=SETTINGS, limits=RequestLimitsSettings(), store=store,
                        disk=Disk(tmp_path / "files"), execute=execute, clock=WallClock(),
                        steps=steps)  # fmt: skip
        tasks.append(asyncio.ensure_future(runner.run()))
        return tasks[-1]

    yield start
    for task in tasks:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_a_line_nested_past_the_bound_fails_alone_and_the_runner_goes_on(
    store: Store, run: Start, tmp_path: Path
) -> None:
    disk = Disk(tmp_path / "files")
    await add_batch(store, disk, "batch_poison", [line("a"), deep_line("deep", 300), line("b")])
    await add_batch(store, disk, "batch_good", [line("c")])
    task = run()
    poison = await ended(store, "batch_poison", task)
    good = await ended(store, "batch_good", task)
    assert (poison.status, good.status) == ("completed", "completed")
    found = await results(store, "batch_poison")
    assert found["deep"]["error"]["code"] == "json_too_deep"
    assert found["a"]["response"]["body"] == {"echo": "a"}
    assert not task.done()


async def test_a_line_whose_run_raises_is_retried_then_fails_alone(
    store: Store, run: Start, tmp_path: Path
) -> None:
    disk = Disk(tmp_path / "files")
    await add_batch(store, disk, "batch_x", [line("boom"), line("fine")])
    tries: list[int] = []

    async def execute(claim: Claim) -> Done | Later:
        if claim.custom_id == "boom":
            tries.append(claim.attempts)
            raise TypeError("Recursion limit reached")
        return await answered(claim)

    task = run(execute=execute)
    job = await ended(store, "batch_x", task)
    assert job.status == "completed"
    found = await results(store, "batch_x")
    assert tries == [1, 2, 3]  # max_attempts
    assert found["boom"]["error"]["code"] == "internal_error"
    assert "TypeError" in found["boom"]["error"]["message"]
    assert "Recursion" not in found["boom"]["error"]["message"]  # no internals to the tenant
    assert found["fine"]["response"]["body"] == {"echo": "fine"}
    assert not task.done()


async def test_a_job_step_that_keeps_raising_fails_the_job_with_its_reason(
    store: Store, run: Start, tmp_path: Path
) -> None:
    disk = Disk(tmp_path / "files")
    await add_batch(store, disk, "batch_poison", [line("a")])
    await add_batch(store, disk, "batch_good", [line("b")])
    steps_seen: list[int] = []

    async def poison(job: Job, _runner: Runner) -> bool | None:
        if job.id != "batch_poison":
            return None
        steps_seen.append(job.attempts)
        raise KeyError("endpoint")

    task = run(steps=[poison])
    good = await ended(store, "batch_good", task)
    failed = await ended(store, "batch_poison", task)
    assert good.status == "completed"
    assert failed.status == "failed"
    assert steps_seen == [1, 2, 3]  # max_job_attempts, counted by the store
    assert failed.errors is not None
    assert failed.errors[0]["code"] == "batch_failed"
    assert "KeyError" in failed.errors[0]["message"]
    assert not task.done()


async def test_a_job_its_process_died_on_each_time_fails_after_restarts(
    store: Store, run: Start, tmp_path: Path
) -> None:
    # Three processes took the job up and died mid-step (their leases lapsed unreleased): the
    # count is in the store, so the next process gives up on it instead of dying a fourth time.
    disk = Disk(tmp_path / "files")
    await add_batch(store, disk, "batch_doomed", [line("a")])
    past = time.time() - 1000
    for n in range(SETTINGS.max_job_attempts):
        assert await store.lease(holder=f"dead-{n}", now=past + n, until=past + n + 0.5)
    ran: list[str] = []

    async def step(job: Job, _runner: Runner) -> bool | None:
        ran.append(job.id)
        return None

    task = run(steps=[step])
    job = await ended(store, "batch_doomed", task)
    assert job.status == "failed"
    assert job.errors is not None
    assert "stopped 3 times" in job.errors[0]["message"]
    assert ran == []  # not tried a fourth time


async def test_a_line_its_process_died_on_each_time_is_not_run_again(
    store: Store, run: Start, tmp_path: Path
) -> None:
    now = time.time()
    await store.add_job(Job(id="batch_l", tenant="t", status="in_progress",
                            endpoint="/v1/chat/completions", input_file_id="f",
                            created_at=int(now), expires_at=int(now) + 3600))  # fmt: skip
    await store.add_lines("batch_l", [LineRow(0, "doomed", orjson.dumps(body("doomed"))),
                                      LineRow(1, "fine", orjson.dumps(body("fine")))])  # fmt: skip
    past = now - 1000
    for n in range(SETTINGS.max_attempts):  # three claims whose holders died
        assert await store.claim(holder=f"dead-{n}", now=past + n, until=past + n + 0.5, limit=1)
    ran: list[str] = []

    async def execute(claim: Claim) -> Done | Later:
        ran.append(claim.custom_id)
        return await answered(claim)

    task = run(execute=execute)
    job = await ended(store, "batch_l", task)
    found = await results(store, "batch_l")
    assert job.status == "completed"
    assert ran == ["fine"]
    assert found["doomed"]["error"]["code"] == "attempts_exhausted"
