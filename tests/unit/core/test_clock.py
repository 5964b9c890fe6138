"""`core.clock.timeout`: a timeout measured on the injected clock, so a `ManualClock` drives it."""

from __future__ import annotations

import asyncio

import pytest

from levergate.core.clock import SystemClock, timeout
from levergate.testing import ManualClock
from tests.unit.layers.traffic.fakes import settle


async def test_a_block_that_outlives_its_time_on_the_clock_times_out() -> None:
    clock = ManualClock(start=100.0)

    async def wait() -> None:
        async with timeout(clock, 5.0):
            await asyncio.Event().wait()

    task = asyncio.create_task(wait())
    await settle()
    clock.advance(4.9)
    await settle()
    assert not task.done()
    clock.advance(0.1)
    await settle()
    assert task.done()
    with pytest.raises(TimeoutError):
        task.result()


async def test_a_block_that_finishes_in_time_is_not_cancelled_later() -> None:
    clock = ManualClock()
    async with timeout(clock, 5.0):
        await asyncio.sleep(0)
    clock.advance(10.0)
    await settle()  # the watcher is gone: nothing cancels this task now
    await asyncio.sleep(0)


async def test_a_cancellation_from_outside_stays_a_cancellation() -> None:
    clock = ManualClock()

    async def wait() -> None:
        async with timeout(clock, 5.0):
            await asyncio.Event().wait()

    task = asyncio.create_task(wait())
    await settle()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_the_system_clock_uses_the_loops_timer() -> None:
    with pytest.raises(TimeoutError):
        async with timeout(SystemClock(), 0.0):
            await asyncio.Event().wait()
