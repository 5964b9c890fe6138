"""`StreamTimer`: a stream body's idle and total timeouts on one timer for the whole stream.

A timeout per chunk (`asyncio.timeout(idle)` around each read) arms and cancels a loop timer
for every chunk: ~30 Python calls a chunk, a quarter of a streamed request's gateway calls
(benchmarks/hotpath_profile.py). Here one timer stays armed at the earliest moment a timeout
could be due and is re-armed only when it fires early (a chunk came in since); when a read has
waited too long, the timer cancels the reading task, and the read turns that cancellation into
`TimeoutError` as `asyncio.timeout` does (a cancellation someone else asked for as well stays a
cancellation), for two C calls a read instead of an `asyncio.Timeout` entered and left.

The scope covers the read only, never the time the stream's consumer holds an event between
reads (an async generator's `yield`): a cancellation then would hit whatever the consumer is
doing. The idle clock starts when a read starts, as it did with a timeout per read.
"""

from __future__ import annotations

import asyncio
import math
import time
import types
from collections.abc import Awaitable, Callable
from typing import Any, Literal, TypeVar

from levergate.core.clock import loop_clock

T = TypeVar("T")

# The task running on a loop, for a read a chunk: asyncio's own `current_task` where it is C
# (3.12 on); on 3.11 it is a Python function around a dict's `get`, which is called directly
# here (one C call a read instead of a Python call and a C call).
_current_task: Callable[[asyncio.AbstractEventLoop], asyncio.Task[Any] | None] = (
    asyncio.tasks._current_tasks.get  # type: ignore[attr-defined]
    if isinstance(asyncio.current_task, types.FunctionType)
    and isinstance(getattr(asyncio.tasks, "_current_tasks", None), dict)
    else asyncio.current_task
)


class StreamTimer:
    def __init__(self, *, idle: float, deadline: float) -> None:
        """`idle`: seconds a read may wait; `deadline`: the exchange's end on `time.monotonic`."""
        self._loop = loop = asyncio.get_running_loop()
        # The loop's clock, which its timers keep: the default loop's is `time.monotonic`,
        # called directly (its `time()` is a Python method around it, a call per read).
        self._now = loop_clock(loop)
        self._idle = idle
        self.deadline = deadline
        self._deadline = self._now() + (deadline - time.monotonic())
        self._until = 0.0  # when the current read has waited too long
        self._at = math.inf  # when the armed timer is due
        self._reader: asyncio.Task[Any] | None = None  # the task waiting in `read`, if any
        self._cancelling = 0  # its cancellation requests when the read began
        self._fired = False  # the timer cancelled the read
        self._handle: asyncio.TimerHandle | None = None
        # Which timeout ended a read (set just before its TimeoutError).
        self.expired: Literal["idle", "total"] | None = None

    async def read(self, awaitable: Awaitable[T], *, idle: float | None = None) -> T:
        """`awaitable`'s result; TimeoutError when the idle or the total timeout passes first.
        `idle` replaces the timer's own for this read (`math.inf`: only the total counts): one
        timer serves a whole exchange, the wait for its head and the reads of its body."""
        self._until = self._now() + (self._idle if idle is None else idle)
        if self._handle is None or self._until < self._at:
            self._arm()
        task = self._reader = _current_task(self._loop)
        if task is None:
            raise RuntimeError("StreamTimer.read runs in a task")
        self._cancelling = task.cancelling()
        self._fired = False
        try:
            return await awaitable
        except asyncio.CancelledError:
            if self._fired and task.uncancel() <= self._cancelling:
                raise TimeoutError from None
            raise
        finally:
            self._reader = None

    def close(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _arm(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._at = min(self._until, self._deadline)
        self._handle = self._loop.call_at(self._at, self._due)

    def _due(self) -> None:
        self._handle, self._at = None, math.inf
        if self._reader is None:
            return  # between reads: the next read arms it again
        now = self._now()
        if now >= self._deadline:
            self.expired = "total"
        elif now >= self._until:
            self.expired = "idle"
        else:
            self._arm()  # a read started since it was armed
            return
        self._fired = True
        self._reader.cancel()
