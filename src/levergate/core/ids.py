"""Fresh request ids: 128 bits as 32 hex characters, the first 48 the wall clock in
milliseconds when the id's batch was drawn, the other 80 from the operating system's CSPRNG
(`os.urandom`), drawn 256 ids at a time.

Why the time first: the request log indexes its records by request id (requestlog/store.py),
and a random id lands on a random leaf of that b-tree. On a grown log (millions of records,
the default bound is 1 GiB) a batch of 500 records then dirtied ~500 index pages, each a WAL
frame of a page written and later copied back into the file, and read those out of SQLite's
cache from the kernel first; ids that grow with time append to the index's last pages
instead (`benchmarks/log_store_io.py`: the bytes written a record, random against
time-ordered ids, in benchmarks/results/logstore.md). The same layout as a UUIDv7's
(RFC 9562) without its version bits: 80 random bits, not 74. Until 2026-12 an id was 96
random bits in 24 hex characters.

What the time tells: when the batch was drawn, to the millisecond, not when the request came
(a batch lasts 256 requests), and nothing a client does not know already. An id may name a
request's result to its client, so it must not be guessable from another's: the 80 random
bits are the kernel's CSPRNG, never a seeded generator, and ids of one batch share only their
time.

Why in batches: `os.urandom(12)` a request was a `getrandom` system call for every request
(`strace -c` on `levergate serve`: 5 system calls an exact-cache hit against the simulator's 3
an answer, this one of the two extra) and ~660 instructions (callgrind). A batch is one call,
its bytes laid out in a `bytearray` by 16 strided slice assignments (6 of the time's bytes,
10 of the random ones'), and one hex encoding for 256 ids; an id is then the next item of a
list, drawn in C.

The batch is the process's, as the kernel's random source is: a child made by `fork` (server
workers) drops what it inherited before it draws (`os.register_at_fork`), so no two processes
hand out the same ids. Threads may draw at once: taking an item from the list's iterator is
atomic under the GIL, and two threads that both find the batch spent each make their own.
"""

from __future__ import annotations

import os
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

__all__ = ["IDS", "Batched", "RandomIds", "fresh_id", "process_wide"]

T = TypeVar("T")
B = TypeVar("B", bound="Batched[Any]")

TIME_BYTES = 6  # 48 bits of milliseconds since the epoch: until the year 10889
RANDOM_BYTES = 10  # 80 bits an id
BYTES = TIME_BYTES + RANDOM_BYTES
WIDTH = 2 * BYTES  # its hex characters


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


class Batched(ABC, Generic[T]):
    """Values drawn a batch at a time: `ids` hands out the batch's, `refill` draws the next
    batch once it is spent (returning its first value). A hot path reads `next(x.ids, None)`
    itself, without `fresh`'s frame. Request ids here, trace and span ids (core/spans.py)."""

    __slots__ = ("ids",)

    def __init__(self) -> None:
        self.ids: Iterator[T] = iter(())

    def fresh(self) -> T:
        found = next(self.ids, None)
        return found if found is not None else self.refill()

    @abstractmethod
    def refill(self) -> T:
        """Draw the next batch into `ids` and return its first value."""

    def forget(self) -> None:
        """Drop the values not yet handed out (a forked child: they are its parent's too)."""
        self.ids = iter(())


def process_wide(source: B) -> B:
    """`source` as the process's: a child made by `fork` drops the batch it inherited."""
    os.register_at_fork(after_in_child=source.forget)
    return source


class RandomIds(Batched[str]):
    """Ids `batch` at a time: a batch is one hex text, and `ids` cuts it into ids as they are
    drawn (a `map` of its slices, in C: ~200 instructions an id, where a list built by a
    comprehension was ~400 an id, amortised). `now_ms`: the wall clock in ms (tests pass
    their own)."""

    __slots__ = ("_cuts", "_now_ms", "batch")

    def __init__(self, batch: int = 256, *, now_ms: Callable[[], int] = wall_ms) -> None:
        super().__init__()
        self.batch = batch
        self._now_ms = now_ms
        self._cuts = tuple(slice(at, at + WIDTH) for at in range(0, WIDTH * batch, WIDTH))

    def refill(self) -> str:
        """A new batch (the last one is spent); returns its first id."""
        n = self.batch
        laid = bytearray(BYTES * n)
        head = self._now_ms().to_bytes(TIME_BYTES, "big")
        for at in range(TIME_BYTES):  # byte `at` of every id: the time's
            laid[at::BYTES] = head[at : at + 1] * n
        drawn = os.urandom(RANDOM_BYTES * n)
        for at in range(RANDOM_BYTES):
            laid[TIME_BYTES + at :: BYTES] = drawn[at * n : (at + 1) * n]
        text = laid.hex()
        self.ids = ids = map(text.__getitem__, self._cuts)
        return next(ids)


# The process's ids (module docstring: reset in a forked child). `gateway.request_id_for`
# draws from `IDS.ids` itself, without `fresh`'s frame (~400 instructions a request).
IDS = process_wide(RandomIds())
fresh_id = IDS.fresh
