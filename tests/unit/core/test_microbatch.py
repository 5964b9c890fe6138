"""The micro-batcher's moments, on a `ManualClock` that moves only when told: a full batch runs at
once, a partial one waits for `max_wait`, leaving never breaks a batch, the last one out cancels
the work, and a batch due while another runs keeps filling."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from levergate.core.microbatch import BatchLimits, Load, MicroBatcher, fits, full
from levergate.errors import UpstreamUnavailable
from levergate.testing import ManualClock


class Recorder:
    def __init__(self, *, gate: asyncio.Event | None = None) -> None:
        self.batches: list[list[str]] = []
        self.gate = gate
        self.cancelled = 0

    async def __call__(self, items: Sequence[str]) -> list[str]:
        self.batches.append(list(items))
        try:
            if self.gate is not None:
                await self.gate.wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return [item.upper() for item in items]


def batcher(
    run: Recorder, clock: ManualClock, *, max_requests: int = 100, max_running: int | None = None
) -> MicroBatcher[str, str]:
    limits = BatchLimits(
        max_wait=0.01, max_items=100, max_requests=max_requests, max_running=max_running
    )
    return MicroBatcher(run, limits=limits, clock=clock)


async def settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


async def test_a_full_batch_runs_without_waiting_and_a_partial_one_waits() -> None:
    clock, run = ManualClock(), Recorder()
    batch = batcher(run, clock, max_requests=3)
    first = [asyncio.create_task(batch.submit(t)) for t in ("a", "b", "c", "d")]
    await settle()
    assert run.batches == [["a", "b", "c"]]  # full: sent with the clock standing still
    assert [await t for t in first[:3]] == ["A", "B", "C"]
    assert not first[3].done()  # alone in the next batch, waiting for company
    clock.advance(0.01)
    assert await first[3] == "D"
    assert run.batches == [["a", "b", "c"], ["d"]]


async def test_keys_never_share_a_batch() -> None:
    clock, run = ManualClock(), Recorder()
    batch = batcher(run, clock)
    tasks = [asyncio.create_task(batch.submit(t, key=t[0])) for t in ("x1", "y1", "x2")]
    await settle()
    clock.advance(0.01)
    assert [await t for t in tasks] == ["X1", "Y1", "X2"]
    assert sorted(run.batches) == [["x1", "x2"], ["y1"]]


async def test_the_opener_leaving_does_not_break_the_batch_and_its_item_is_not_sent() -> None:
    clock, run = ManualClock(), Recorder()
    batch = batcher(run, clock)
    opener = asyncio.create_task(batch.submit("a"))
    other = asyncio.create_task(batch.submit("b"))
    await settle()
    opener.cancel()
    await settle()
    clock.advance(0.01)
    assert await other == "B"
    assert opener.cancelled()
    assert run.batches == [["b"]]


async def test_a_waiter_leaving_mid_call_leaves_the_call_running_for_the_others() -> None:
    clock, gate = ManualClock(), asyncio.Event()
    run = Recorder(gate=gate)
    batch = batcher(run, clock, max_requests=2)
    a, b = asyncio.create_task(batch.submit("a")), asyncio.create_task(batch.submit("b"))
    await settle()
    a.cancel()
    await settle()
    gate.set()
    assert await b == "B"
    assert run.cancelled == 0


async def test_the_last_waiter_leaving_cancels_the_call() -> None:
    clock, gate = ManualClock(), asyncio.Event()
    run = Recorder(gate=gate)
    batch = batcher(run, clock, max_requests=2)
    tasks = [asyncio.create_task(batch.submit(t)) for t in ("a", "b")]
    await settle()
    for task in tasks:
        task.cancel()
    await asyncio.wait(tasks)
    assert run.cancelled == 1
    later = asyncio.create_task(batch.submit("c"))  # the batcher is still usable
    await settle()
    clock.advance(0.01)
    gate.set()
    assert await later == "C"


async def test_a_batch_due_while_another_runs_keeps_filling() -> None:
    clock, gate = ManualClock(), asyncio.Event()
    run = Recorder(gate=gate)
    batch = batcher(run, clock, max_running=1)
    first = asyncio.create_task(batch.submit("a"))
    await settle()
    clock.advance(0.01)
    await settle()
    assert run.batches == [["a"]]  # running, held at the gate
    later = [asyncio.create_task(batch.submit(t)) for t in ("b", "c")]
    await settle()
    clock.advance(0.01)  # due, but no slot: it stays open
    late = asyncio.create_task(batch.submit("d"))
    await settle()
    gate.set()
    assert [await t for t in (first, *later, late)] == ["A", "B", "C", "D"]
    assert run.batches == [["a"], ["b", "c", "d"]]


async def test_a_run_returning_the_wrong_number_of_results_fails_its_batch() -> None:
    async def short(items: Sequence[str]) -> list[str]:
        return list(items)[1:]

    batch: MicroBatcher[str, str] = MicroBatcher(
        short, limits=BatchLimits(max_wait=0.0, max_items=8, max_requests=8), clock=ManualClock()
    )
    results = await asyncio.gather(batch.submit("a"), batch.submit("b"), return_exceptions=True)
    assert all(isinstance(r, UpstreamUnavailable) for r in results)


def test_bounds() -> None:
    limits = BatchLimits(max_wait=0, max_items=4, max_requests=2, max_bytes=10)
    assert fits(Load(), Load(1, 99, 999), limits)  # alone, anything runs
    assert fits(Load(1, 2, 5), Load(1, 2, 5), limits)
    assert not fits(Load(1, 2, 5), Load(1, 3, 0), limits)
    assert not fits(Load(1, 1, 5), Load(1, 1, 6), limits)
    assert full(Load(2, 1, 0), limits)
    assert not full(Load(1, 3, 9), limits)
    with pytest.raises(ValueError, match="positive"):
        BatchLimits(max_wait=0, max_items=0, max_requests=1)
