"""Waiting for background work in tests: yield to the event loop until a condition holds, a
bounded number of times and then for a bounded time (no test waits forever; the bound only
fails a test that would hang, none asserts a duration)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager


async def until(condition: Callable[[], bool], *, seconds: float = 30.0) -> None:
    """Let other tasks run until `condition` holds: 10,000 turns of the loop, then, for work
    in another thread (a log writer's SQLite insert), which turns alone do not wait for on a
    loaded machine, naps of 10 ms for up to `seconds`; fails then."""
    for _ in range(10_000):
        if condition():
            return
        await asyncio.sleep(0)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the condition never held")


@asynccontextmanager
async def running(job: Callable[[], Awaitable[None]]) -> AsyncIterator[None]:
    """`job` running as the Supervisor would run it, cancelled (and seen to end) on the way out."""
    task = asyncio.ensure_future(job())
    try:
        yield
    finally:
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        else:
            raise AssertionError("the job ended by itself instead of being cancelled")
