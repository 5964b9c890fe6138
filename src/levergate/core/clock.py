"""Time as a seam: limiters, backoff, balancers and the simulator take a `Clock`, so tests can
drive them with `levergate.testing.ManualClock` and never sleep."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Monotonic seconds."""
        ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    # The C function itself, not a method around it: layers read the clock ~8 times a request,
    # and a Python frame each was ~1% of a proxied request's instructions (issue 22).
    now = staticmethod(time.monotonic)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


def loop_clock(loop: asyncio.AbstractEventLoop) -> Callable[[], float]:
    """`loop.time`, the clock its timers keep, or `time.monotonic` itself where that is all it
    is (asyncio's own loops: their `time()` is a Python method around it, a call each time)."""
    return time.monotonic if type(loop).time is asyncio.BaseEventLoop.time else loop.time


def timeout(clock: Clock, seconds: float) -> AbstractAsyncContextManager[object]:
    """`asyncio.timeout(seconds)` measured on `clock`: the block raises `TimeoutError` once
    `clock` has moved `seconds` on. Deadlines are absolute times on the gateway's clock, so they
    must be enforced on that clock too — the loop's own clock would disagree with a
    `ManualClock` (or any clock a test or an embedder injects). The system clock keeps
    asyncio's own timer: it is the loop's clock, and costs no task."""
    if type(clock) is SystemClock:
        return asyncio.timeout(max(0.0, seconds))
    return _ClockTimeout(clock, seconds)


class _ClockTimeout:
    """A watcher sleeps on the clock and cancels the block's task when it wakes; leaving the
    block first cancels the watcher. The cancellation it caused becomes `TimeoutError`, as
    `asyncio.timeout` does (any other cancellation passes through untouched)."""

    def __init__(self, clock: Clock, seconds: float) -> None:
        self._clock = clock
        self._seconds = seconds
        self._fired = False
        self._task: asyncio.Task[object] | None = None
        self._watcher: asyncio.Task[None] | None = None

    async def __aenter__(self) -> None:
        self._task = asyncio.current_task()
        if self._task is None:
            raise RuntimeError("a clock timeout needs a running task")
        self._watcher = asyncio.get_running_loop().create_task(self._expire())

    async def _expire(self) -> None:
        await self._clock.sleep(self._seconds)
        self._fired = True
        if self._task is not None:
            self._task.cancel()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
        ours = self._fired and exc_type is asyncio.CancelledError and self._task is not None
        if ours and self._task is not None and self._task.uncancel() == 0:
            raise TimeoutError from exc
