"""Single flight: identical requests in flight at the same time go upstream once.

Used by the exact cache (the fingerprint is the flight key), so only requests that may share an
answer are ever coalesced. The first caller's request is sent; everyone who arrives while it is
in flight waits for the same outcome:

- a whole answer: each waiter gets its own `Completed` over the same bytes;
- a stream: each waiter gets its own `Stream` over one shared buffer. A late joiner first gets
  the chunks so far, then the live ones. Whichever waiter is furthest ahead pulls the next chunk
  from upstream; the others read the buffer. A waiter that disconnects leaves the others
  streaming; the upstream is closed when the last one leaves;
- a failure: raised to every waiter once. Nobody retries on their own, and the flight ends with
  the failure, so the next request starts afresh — no retry storm.

Each waiter also gets the leader's `origin` (the exact cache passes the call's trace): what
answered the shared reply is known only to the call that went upstream, and a follower's saving
is priced at it.

The upstream call runs in a task the flight owns, shielded from any one waiter's cancellation,
and cancelled once no waiter is left; each upstream read runs the same way. No task outlives the
flight.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any, Generic, TypeVar

from levergate.core.reply import Completed, Event, Reply, Stream

T = TypeVar("T")


class SingleFlight(Generic[T]):
    def __init__(self) -> None:
        self._flights: dict[str, _Flight[T]] = {}

    def __len__(self) -> int:
        return len(self._flights)

    async def run(
        self, key: str, fetch: Callable[[], Awaitable[Reply]], *, origin: T
    ) -> tuple[Reply, T]:
        """The reply for this waiter, and the `origin` of the waiter that led the flight (this
        waiter's own when it led)."""
        flight = self._flights.get(key)
        if flight is None:
            flight = self._flights[key] = _Flight(key, self._flights, origin)
            flight.start(fetch)
        return await flight.join(), flight.origin


class _Flight(Generic[T]):
    __slots__ = ("_flights", "_key", "_task", "_waiters", "origin")

    def __init__(self, key: str, flights: dict[str, _Flight[T]], origin: T) -> None:
        self._key = key
        self._flights = flights
        self.origin = origin
        self._waiters = 0
        self._task: asyncio.Task[Completed | _Shared] | None = None

    def start(self, fetch: Callable[[], Awaitable[Reply]]) -> None:
        self._task = asyncio.create_task(self._lead(fetch))

    async def _lead(self, fetch: Callable[[], Awaitable[Reply]]) -> Completed | _Shared:
        try:
            reply = await fetch()
        except BaseException:
            self._on_end()
            raise
        if isinstance(reply, Completed):
            self._on_end()
            return reply
        return _Shared(reply, on_end=self._on_end)

    def _on_end(self) -> None:
        """Later arrivals start a new flight (or, once the answer is stored, hit the cache)."""
        if self._flights.get(self._key) is self:
            del self._flights[self._key]

    async def join(self) -> Reply:
        task = self._task
        if task is None:
            raise RuntimeError("join() before start()")
        self._waiters += 1
        try:
            result = await asyncio.shield(task)
        except asyncio.CancelledError:
            self._waiters -= 1
            if self._waiters == 0:
                await self._abandon(task)
            raise
        self._waiters -= 1
        if isinstance(result, Completed):
            return Completed(result.raw, status=result.status, headers=dict(result.headers))
        return result.subscribe()

    async def _abandon(self, task: asyncio.Task[Completed | _Shared]) -> None:
        """The last waiter left before taking its reply: stop the work nobody will read."""
        self._on_end()
        if not task.done():
            task.cancel()
            return
        if not task.cancelled() and task.exception() is None:
            result = task.result()
            if isinstance(result, _Shared):
                await result.release_if_unused()


class _Shared:
    """One upstream stream, many readers."""

    __slots__ = ("_done", "_error", "_events", "_on_end", "_pending", "_readers", "_upstream")

    def __init__(self, upstream: Stream, *, on_end: Callable[[], None]) -> None:
        self._upstream = upstream
        self._on_end = on_end
        self._events: list[Event] = []
        self._done = False
        self._error: BaseException | None = None
        self._pending: asyncio.Task[None] | None = None
        self._readers = 0

    def subscribe(self) -> Stream:
        self._readers += 1
        return Stream(_Reader(self), headers=dict(self._upstream.headers))

    async def release_if_unused(self) -> None:
        if self._readers == 0:
            await self._release()

    async def read(self, index: int) -> Event:
        """The event at `index`, pulling from upstream if nobody has yet."""
        while True:
            if index < len(self._events):
                return self._events[index]
            if self._error is not None:
                raise self._error
            if self._done:
                raise StopAsyncIteration
            await self._pull()

    async def leave(self) -> None:
        self._readers -= 1
        if self._readers == 0:
            await self._release()

    async def _pull(self) -> None:
        if self._pending is None:
            self._pending = asyncio.create_task(self._next())
        pending = self._pending
        try:
            await asyncio.shield(pending)
        finally:
            if self._pending is pending and pending.done():
                self._pending = None

    async def _next(self) -> None:
        try:
            event = await anext(aiter(self._upstream))
        except StopAsyncIteration:
            self._done = True
            self._on_end()
        except Exception as exc:
            self._error = exc
            self._on_end()
        else:
            self._events.append(event)

    async def _release(self) -> None:
        """No reader left: close the upstream (mid-answer, this cancels the provider call)."""
        self._on_end()
        pending, self._pending = self._pending, None
        if pending is not None and not pending.done():
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pending
        if not self._done and self._error is None:
            self._error = asyncio.CancelledError()
        await self._upstream.aclose()


class _Reader(AsyncGenerator[Event, None]):
    """One waiter's view of a shared stream. A class rather than an async generator function
    because it must leave the flight even when closed before its first read (an async
    generator that never started skips its `finally` on `aclose`)."""

    __slots__ = ("_closed", "_index", "_shared")

    def __init__(self, shared: _Shared) -> None:
        self._shared = shared
        self._index = 0
        self._closed = False

    async def asend(self, value: None) -> Event:
        del value
        if self._closed:
            raise StopAsyncIteration
        event = await self._shared.read(self._index)
        self._index += 1
        return event

    async def athrow(self, typ: Any, val: Any = None, tb: Any = None) -> Event:
        del tb
        await self.aclose()
        raise typ if val is None else val

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            await self._shared.leave()
