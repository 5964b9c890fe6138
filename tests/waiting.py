"""Waiting for background work in tests without a clock: yield to the event loop until a
condition holds, a bounded number of times (no test waits forever, none asserts a duration)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def until(condition: Callable[[], bool]) -> None:
    """Let other tasks run until `condition` holds; fails after 10,000 turns of the loop."""
    for _ in range(10_000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("the condition never held")
