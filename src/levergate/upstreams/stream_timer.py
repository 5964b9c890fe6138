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


class _Wait:
    """One read waiting under a `Watchdog`: when it has waited too long (on the loop's clock),
    its task, that task's cancellation requests when it began, and whether the timer fired."""

    __slots__ = ("cancelling", "fired", "task", "until")

    def __init__(self, until: float, task: asyncio.Task[Any]) -> None:
        self.until = until
        self.task = task
        self.cancelling = task.cancelling()
        self.fired = False


class Watchdog:
    """The deadlines of many reads on one loop timer: what a whole answer's exchange waits for
    (its head within time-to-first-byte, its body within the total), for every exchange of an
    upstream at once. A `StreamTimer` per exchange armed and cancelled a loop timer for each
    request, ~26k instructions with its bookkeeping (callgrind; uvloop's timer alone ~10k),
    4% of a proxied whole answer (issue 22). Here a read joins a set and leaves it; the one
    timer is armed at the soonest deadline of the reads waiting when it is armed, and when it
    fires it cancels the reads that have waited too long and is armed again at the soonest
    left (none left: not at all). A read's deadline only comes later than the timer's (a
    request's time-to-first-byte is after the armed one's), except after the timer was armed
    for a body's total: then the read arms it earlier. So the timer fires about once per
    time-to-first-byte under steady traffic, and each firing looks at the reads in flight.

    As `StreamTimer`, the timeout cancels the reading task and the read turns that cancellation
    into `TimeoutError` (one someone else asked for as well stays a cancellation), and the
    scope is the read only. Bound to the loop it first runs on; a read on another loop (an
    embedder that runs its gateway under several `asyncio.run`s) starts it over there."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._now: Callable[[], float] = time.monotonic
        self._waits: set[_Wait] = set()
        self._handle: asyncio.TimerHandle | None = None
        self._at = math.inf  # when the armed timer is due

    async def read(self, awaitable: Awaitable[T], deadline: float) -> T:
        """`awaitable`'s result; TimeoutError if `deadline` (on `time.monotonic`) passes first."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._bind(loop)
        now = self._now
        until = deadline if now is time.monotonic else now() + (deadline - time.monotonic())
        task = _current_task(loop)
        if task is None:
            raise RuntimeError("Watchdog.read runs in a task")
        wait = _Wait(until, task)
        waits = self._waits
        waits.add(wait)
        if until < self._at:
            self._arm(loop, until)
        try:
            return await awaitable
        except asyncio.CancelledError:
            if wait.fired and task.uncancel() <= wait.cancelling:
                raise TimeoutError from None
            raise
        finally:
            waits.discard(wait)

    def close(self) -> None:
        """Leave no timer on the loop (the upstream is closing: no read waits any more)."""
        if self._handle is not None:
            self._handle.cancel()
        self._handle, self._at = None, math.inf

    def _bind(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._loop, self._now = loop, loop_clock(loop)
        self._waits = set()
        self._handle, self._at = None, math.inf

    def _arm(self, loop: asyncio.AbstractEventLoop, at: float) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._at = at
        self._handle = loop.call_at(at, self._due)

    def _due(self) -> None:
        self._handle, self._at = None, math.inf
        now = self._now()
        soonest = math.inf
        for wait in self._waits:
            if wait.fired:
                continue  # cancelled already: leaves the set when its task runs
            if wait.until <= now:
                wait.fired = True
                wait.task.cancel()
            elif wait.until < soonest:
                soonest = wait.until
        if soonest < math.inf and self._loop is not None:
            self._arm(self._loop, soonest)
