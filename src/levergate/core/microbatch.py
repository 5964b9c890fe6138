"""`MicroBatcher`: many concurrent one-item calls become one call with a list of items.

Used wherever the upstream takes many inputs per call for little more than the price of one:
the MicroBatch layer (one-input `/v1/embeddings` requests to an HTTP provider, per model) and
the local MiniLM embedder (concurrent texts onto its one model thread). The local llama.cpp
engine does not use it: its scheduler batches continuously, admitting new sequences between
decode steps, which a collect-then-run batch (every answer waiting for the longest) would only
make worse.

A submission joins the open batch for its key, or opens one. A batch closes when it is full
(`max_requests` submissions, `max_items` items, or `max_bytes`) or when its first submission
has waited `max_wait` seconds on the injected clock; then, once fewer than `max_running`
batches of this batcher are running (until then it keeps filling), it runs. An item larger
than a whole batch runs alone: the upstream judges it, not the batcher.

Structured concurrency, the way `layers/cache/coalesce.py` does single flight, rather than a
background job under the `Supervisor`: a batch is one task the batch owns, started by its
first submission and awaited (shielded) by every submitter, so work exists only while somebody
waits for it and the library, the proxy and the local embedder need no lifecycle wiring. A
submitter that is cancelled only leaves: its item is dropped if the batch has not run yet, the
others still get theirs; the last one to leave cancels the task and waits for it to end. No
task outlives its waiters.

Results are split back by index: `run(items)` must return one result per item, in order. A
failure of `run` reaches exactly the submitters of that batch, each raising it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from levergate.core.clock import Clock, timeout
from levergate.errors import UpstreamUnavailable

In = TypeVar("In")
Out = TypeVar("Out")


@dataclass(frozen=True, slots=True)
class BatchLimits:
    """The bounds of one batch. `max_running` bounds the batches of one batcher in flight at
    once (None: no bound); `max_wait` is in seconds."""

    max_wait: float
    max_items: int
    max_requests: int
    max_bytes: int | None = None
    max_running: int | None = None

    def __post_init__(self) -> None:
        if self.max_wait < 0 or self.max_items < 1 or self.max_requests < 1:
            raise ValueError("batch limits must be positive")
        if (self.max_bytes is not None and self.max_bytes < 1) or (
            self.max_running is not None and self.max_running < 1
        ):
            raise ValueError("batch limits must be positive")


@dataclass(frozen=True, slots=True)
class Load:
    """What a batch holds (or an item adds): submissions, items and bytes."""

    requests: int = 0
    items: int = 0
    bytes: int = 0

    def __add__(self, other: Load) -> Load:
        return Load(
            self.requests + other.requests, self.items + other.items, self.bytes + other.bytes
        )

    def __sub__(self, other: Load) -> Load:
        return Load(
            self.requests - other.requests, self.items - other.items, self.bytes - other.bytes
        )


def fits(held: Load, more: Load, limits: BatchLimits) -> bool:
    """Whether `more` may join a batch holding `held`. An empty batch takes anything, so an item
    over the limits on its own still runs (alone)."""
    if held.requests == 0:
        return True
    total = held + more
    return (
        total.requests <= limits.max_requests
        and total.items <= limits.max_items
        and (limits.max_bytes is None or total.bytes <= limits.max_bytes)
    )


def full(held: Load, limits: BatchLimits) -> bool:
    """Whether a batch holding `held` can take nothing more and should run now."""
    return (
        held.requests >= limits.max_requests
        or held.items >= limits.max_items
        or (limits.max_bytes is not None and held.bytes >= limits.max_bytes)
    )


@dataclass(slots=True)
class BatcherStats:
    """Counters since start, read by benchmarks, tests and the layer's headers."""

    batches: int = 0  # batches run
    submitted: int = 0  # items handed to `run`
    largest: int = 0  # most submissions in one batch


@dataclass(eq=False, slots=True)
class _Entry(Generic[In]):
    item: In
    load: Load
    gone: bool = False  # its submitter left before the batch ran
    position: int = -1  # its index in the items `run` got


class _Batch(Generic[In, Out]):
    __slots__ = ("closed", "entries", "held", "task", "waiters")

    def __init__(self) -> None:
        self.entries: list[_Entry[In]] = []
        self.held = Load()
        self.closed = asyncio.Event()  # set when no submission may join any more
        self.task: asyncio.Task[list[Out]] | None = None
        self.waiters = 0


class MicroBatcher(Generic[In, Out]):
    def __init__(
        self,
        run: Callable[[Sequence[In]], Awaitable[Sequence[Out]]],
        *,
        limits: BatchLimits,
        clock: Clock,
        items: Callable[[In], int] = lambda _: 1,
        size: Callable[[In], int] = lambda _: 0,
    ) -> None:
        """`items` and `size` say how many items and bytes a submission counts for."""
        self._run = run
        self.limits = limits
        self._clock = clock
        self._items = items
        self._size = size
        self._open: dict[Hashable, _Batch[In, Out]] = {}
        self._slots = asyncio.Semaphore(limits.max_running) if limits.max_running else None
        self.stats = BatcherStats()

    async def submit(self, item: In, *, key: Hashable = None) -> Out:
        """`item`'s own result from the batch it joined (batches never mix keys)."""
        entry = _Entry(item, Load(1, self._items(item), self._size(item)))
        batch = self._open.get(key)
        if batch is not None and not fits(batch.held, entry.load, self.limits):
            self._close(key, batch)
            batch = None
        if batch is None:
            batch = self._open[key] = _Batch()
            batch.task = asyncio.create_task(self._drive(key, batch))
        batch.entries.append(entry)
        batch.held += entry.load
        if full(batch.held, self.limits):
            self._close(key, batch)
        return await self._wait(key, batch, entry)

    async def _wait(self, key: Hashable, batch: _Batch[In, Out], entry: _Entry[In]) -> Out:
        task = batch.task
        if task is None:
            raise RuntimeError("a batch without its task")
        batch.waiters += 1
        try:
            results = await asyncio.shield(task)
        except asyncio.CancelledError:
            entry.gone = True
            if not batch.closed.is_set():
                batch.held -= entry.load
            if batch.waiters == 1:  # the last one: nobody will read the batch
                self._close(key, batch)
                task.cancel()
                await asyncio.wait([task])
                if not task.cancelled():
                    task.exception()  # retrieved: nobody else will
            raise
        finally:
            batch.waiters -= 1
        return results[entry.position]

    def _close(self, key: Hashable, batch: _Batch[In, Out]) -> None:
        if self._open.get(key) is batch:
            del self._open[key]
        batch.closed.set()

    async def _drive(self, key: Hashable, batch: _Batch[In, Out]) -> list[Out]:
        try:
            if self.limits.max_wait > 0 and not batch.closed.is_set():
                with contextlib.suppress(TimeoutError):
                    async with timeout(self._clock, self.limits.max_wait):
                        await batch.closed.wait()
            async with self._slots or contextlib.nullcontext():
                self._close(key, batch)
                return await self._send(batch)
        finally:
            self._close(key, batch)

    async def _send(self, batch: _Batch[In, Out]) -> list[Out]:
        live = [entry for entry in batch.entries if not entry.gone]
        for position, entry in enumerate(live):
            entry.position = position
        if not live:
            return []
        results = list(await self._run([entry.item for entry in live]))
        if len(results) != len(live):
            raise UpstreamUnavailable(
                f"a batch of {len(live)} items came back with {len(results)} results"
            )
        self.stats.batches += 1
        self.stats.submitted += len(live)
        self.stats.largest = max(self.stats.largest, len(live))
        return results
