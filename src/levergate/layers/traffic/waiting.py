"""`WaitingRoom`: where a request waits when a limit is reached, in priority order, bounded by
its deadline. Used by `Admission` (tenant limits) and `Limits` (endpoint and key limits).

Over a limit, parallelism only turns latency into 429s; waiting turns it back into latency,
and the order of the wait is the scheduling policy: interactive before default before batch,
first come first served within a class. Only the head of the queue asks the limit store (no
thundering herd at each refill); everyone behind it waits for their turn.

A request is shed at once — not after waiting in vain — when its predicted wait already
exceeds its deadline: the limiter's current wait plus the cost queued ahead of it, converted
to seconds by each limit's rate. Shedding raises `shed_error(retry_after)`, so the caller
chooses 429 (a tenant's own limit) or 503 (the gateway's capacity).

Concurrency slots (`Slots`) are shared objects: one endpoint-wide counter can sit in the rooms
of all of its keys. A room admits only when every slot has room and every charge fits.

Background traffic (batch-priority requests, and anything sent at the flex or batch tier)
leaves a share of each key's capacity to the rest (`RateLimitsSettings.interactive_reserve`):
its own charges carry the extra background limits (layers/traffic/limits.py), a slot admits it
only below its background cap (`Slots.free(background=True)`), and it queues behind the other
requests of its priority class. Without that a batch could take every slot, and interactive
latency grew with the key's limit.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from levergate.core.clock import Clock
from levergate.errors import LevergateError
from levergate.stores.limits import Charge, LimitStore


class Slots:
    """A concurrency limit whose size may change (AIMD). `limit()` None means unbounded.
    Background requests may hold only `reserve` short of it (at least one slot)."""

    def __init__(self, limit: Callable[[], int | None], *, reserve: float = 0.0) -> None:
        self.limit = limit
        self.reserve = reserve
        self.in_use = 0
        self._listeners: list[asyncio.Event] = []

    def free(self, *, background: bool = False) -> bool:
        cap = self.limit()
        if cap is None:
            return True
        if background and self.reserve > 0:
            cap = max(1, cap - math.ceil(cap * self.reserve))
        return self.in_use < cap

    def listen(self, event: asyncio.Event) -> None:
        self._listeners.append(event)

    def release(self) -> None:
        self.in_use -= 1
        for event in self._listeners:
            event.set()


@dataclass(eq=False)
class _Waiter:
    priority: int
    seq: int
    charges: Sequence[Charge]
    deadline: float
    background: bool = False
    turn: asyncio.Event = field(default_factory=asyncio.Event)
    evicted: bool = False

    @property
    def order(self) -> tuple[int, bool, int]:
        return (self.priority, self.background, self.seq)


class WaitingRoom:
    def __init__(
        self,
        *,
        store: LimitStore,
        clock: Clock,
        slots: Sequence[Slots] = (),
        max_queue: int = 10_000,
        shed_error: Callable[[str, float], LevergateError],
    ) -> None:
        self._store = store
        self._clock = clock
        self._slots = tuple(slots)
        self._max_queue = max_queue
        self._shed = shed_error
        self._queue: list[_Waiter] = []
        self._seq = itertools.count()
        self._capacity = asyncio.Event()
        for slot in self._slots:
            slot.listen(self._capacity)
        # When the limiter last said it frees up: the balancer's view of this room's backlog.
        self.free_at = 0.0

    @property
    def queued(self) -> int:
        return len(self._queue)

    @property
    def idle(self) -> bool:
        """Nobody waiting and no slot held: the room can be forgotten without losing state."""
        return not self._queue and all(slot.in_use == 0 for slot in self._slots)

    def backlog_seconds(self, now: float) -> float:
        """Predicted wait of a newcomer of the lowest priority (used to score endpoints)."""
        return self._predicted(priority=1 << 30, charges=(), now=now)

    async def enter(
        self, *, charges: Sequence[Charge], priority: int, deadline: float,
        background: bool = False,
    ) -> None:  # fmt: skip
        """Return once admitted (slots taken, charges spent); raise the shed error otherwise.
        `background`: batch or flex traffic, held out of the reserved share."""
        now = self._clock.now()
        if not self._queue and self._slots_free(background):
            wait = await self._try(charges)
            if wait == 0:
                return
            self.free_at = now + wait
            if now + wait > deadline:
                raise self._shed("deadline", wait)
        else:
            predicted = self._predicted(priority=priority, charges=charges, now=now)
            if now + predicted > deadline:
                raise self._shed("deadline", max(predicted, 1.0))
        waiter = _Waiter(priority, next(self._seq), charges, deadline, background)
        self._push(waiter)
        try:
            await self._wait_turn(waiter)
        finally:
            self._remove(waiter)

    def release(self) -> None:
        """Give back the slots `enter` took (the call, or its stream, is over)."""
        for slot in self._slots:
            slot.release()

    async def _wait_turn(self, me: _Waiter) -> None:
        while True:
            if me.evicted:
                raise self._shed("queue_full", max(1.0, self.free_at - self._clock.now()))
            now = self._clock.now()
            if self._queue[0] is not me:
                await self._until(me.turn, me.deadline - now, me)
                me.turn.clear()
                continue
            if not self._slots_free(me.background):
                self._capacity.clear()
                await self._until(self._capacity, me.deadline - now, me)
                continue
            wait = await self._try(me.charges)
            if wait == 0:
                return
            now = self._clock.now()
            self.free_at = now + wait
            if now + wait > me.deadline:
                raise self._shed("deadline", wait)
            # Sleep until the limit frees, unless evicted meanwhile (the turn event says so).
            me.turn.clear()
            await self._event_or_timer(me.turn, wait)

    async def _until(self, event: asyncio.Event, seconds: float, me: _Waiter) -> None:
        """Wait for `event`, or shed `me` when its deadline comes first."""
        expired = seconds <= 0 or not await self._event_or_timer(event, seconds)
        if expired and not me.evicted:
            raise self._shed("deadline", max(1.0, self.free_at - self._clock.now()))

    async def _event_or_timer(self, event: asyncio.Event, seconds: float) -> bool:
        """True when `event` was set before `seconds` passed on the clock."""
        if event.is_set():
            return True
        waiting = asyncio.ensure_future(event.wait())
        timer = asyncio.ensure_future(self._clock.sleep(seconds))
        try:
            done, _ = await asyncio.wait({waiting, timer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiting.cancel()
            timer.cancel()
            await asyncio.gather(waiting, timer, return_exceptions=True)
        return waiting in done

    def _predicted(self, *, priority: int, charges: Sequence[Charge], now: float) -> float:
        if not self._queue and not charges:
            return max(0.0, self.free_at - now)
        ahead: dict[str, float] = {}
        intervals: dict[str, float] = {}
        for waiter in self._queue:
            if waiter.priority > priority:
                break
            for charge in waiter.charges:
                ahead[charge.key] = ahead.get(charge.key, 0.0) + charge.cost
                intervals[charge.key] = charge.rate.interval
        for charge in charges:
            ahead[charge.key] = ahead.get(charge.key, 0.0) + charge.cost
            intervals[charge.key] = charge.rate.interval
        queued = max((units * intervals[key] for key, units in ahead.items()), default=0.0)
        return max(0.0, self.free_at - now) + queued

    def _slots_free(self, background: bool = False) -> bool:
        return all(slot.free(background=background) for slot in self._slots)

    async def _try(self, charges: Sequence[Charge]) -> float:
        """Take the slots first (so concurrent arrivals cannot all squeeze into the last one
        while the store answers), then the charges; give the slots back if refused."""
        for slot in self._slots:
            slot.in_use += 1
        try:
            wait = await self._store.acquire(charges) if charges else 0.0
        except BaseException:
            self.release()
            raise
        if wait > 0:
            self.release()
        return wait

    def _push(self, waiter: _Waiter) -> None:
        if len(self._queue) >= self._max_queue:
            last = self._queue[-1]
            if last.priority <= waiter.priority:
                raise self._shed("queue_full", max(1.0, self.free_at - self._clock.now()))
            last.evicted = True
            last.turn.set()
            self._queue.pop()
        bisect.insort(self._queue, waiter, key=lambda w: w.order)
        self._queue[0].turn.set()

    def _remove(self, waiter: _Waiter) -> None:
        if waiter in self._queue:
            was_head = self._queue[0] is waiter
            self._queue.remove(waiter)
            if was_head and self._queue:
                self._queue[0].turn.set()


def deadline_for(*, ctx_deadline: float | None, priority_wait: float, now: float) -> float:
    """How long a request may wait here: its own deadline, or its class's longest wait."""
    bound = now + priority_wait
    return bound if ctx_deadline is None else min(ctx_deadline, bound)
