"""Giving memory back after large requests (server/memory.py): the trimmer's rule on a manual
clock, and glibc's malloc_trim on this very process's fragmented heap."""

from __future__ import annotations

import asyncio

import pytest

from levergate.server.memory import MIB, Trimmer, glibc, resident_bytes
from levergate.testing import ManualClock
from tests.required import missing


async def looks(clock: ManualClock, n: int) -> None:
    """`n` looks of the trimmer: each time it sleeps on the clock again (a trim runs in a
    worker thread first: a bounded wait), the clock moves to its next look."""
    for _ in range(n):
        for _ in range(1000):
            if clock._sleepers:
                break
            await asyncio.sleep(0.005)
        clock.advance(5.0)
    for _ in range(1000):  # and the last look is done
        if clock._sleepers:
            return
        await asyncio.sleep(0.005)


async def test_it_trims_when_malloc_freed_more_than_the_bound_since_its_last_trim() -> None:
    # MiB malloc holds free, one reading per look (and one right after each trim).
    readings = iter([100, 150, 200, 600, 590, 560, 620, 680, 700, 700])
    trimmed: list[int] = []
    current = {"mib": 0}

    def free() -> int:
        current["mib"] = next(readings)
        return current["mib"] * MIB

    def trim() -> int:
        trimmed.append(current["mib"])
        return 1

    clock = ManualClock()
    trimmer = Trimmer(every=5.0, above=64 * MIB, clock=clock, trim=trim, free=free)
    task = asyncio.create_task(trimmer.run())
    await asyncio.sleep(0)
    await looks(clock, 2)  # 150 (+50: no), 200 (+100 over 100: trim)
    assert trimmed == [200]
    # Right after the trim malloc counted 600 free: the floor. 590, 560, then 620 (+60 over
    # 560: no), 680 (+120 over 560: trim), then 700 is the floor.
    await looks(clock, 4)
    assert trimmed == [200, 680]
    assert trimmer.trims == 2
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_malloc_trim_gives_a_fragmented_heap_back() -> None:
    found = glibc()
    if found is None or resident_bytes() is None:
        missing("no glibc 2.33+ or no /proc on this system")
    trim, free = found
    clock = ManualClock()
    trimmer = Trimmer(every=1.0, above=64 * MIB, clock=clock, trim=trim, free=free)
    task = asyncio.create_task(trimmer.run())
    await asyncio.sleep(0)  # it has read its floor and sleeps
    # ~240 MB through malloc beyond what it holds free already (earlier tests in this process
    # may have left free chunks, which these allocations reuse first).
    before = free()
    junk = [b"x" * 4000 + bytes([i % 256]) for i in range((before + 240 * MIB) // 4000)]
    kept = junk[::50]  # one in fifty stays: the freed pages are not at the heap's top
    del junk
    grown = resident_bytes()
    assert grown is not None
    assert free() > before + 150 * MIB
    clock.advance(1.0)
    for _ in range(1000):  # the trim runs in a worker thread: a bounded wait for it
        if trimmer.trims:
            break
        await asyncio.sleep(0.01)
    assert trimmer.trims == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    after = resident_bytes()
    assert after is not None
    assert after < grown - 100 * MIB
    assert kept  # held to the end: the pages under it could not be given back whole
