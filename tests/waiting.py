"""Waiting for background work in tests without a clock: yield to the event loop until a
condition holds, a bounded number of times (no test waits forever, none asserts a duration)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager


async def until(condition: Callable[[], bool]) -> None:
    """Let other tasks run until `condition` holds; fails after 10,000 turns of the loop."""
    for _ in range(10_000):
        if condition():
            return
        await asyncio.sleep(0)
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
