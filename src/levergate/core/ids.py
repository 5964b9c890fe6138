"""Fresh request ids: 96 random bits as 24 hex characters, from the operating system's CSPRNG
(`os.urandom`), drawn 256 ids at a time.

Why in batches: `os.urandom(12)` a request was a `getrandom` system call for every request
(`strace -c` on `levergate serve`: 5 system calls an exact-cache hit against the simulator's 3
an answer, this one of the two extra) and ~660 instructions (callgrind). A batch is one call
and one hex encoding for 256 ids; an id is then the next item of a list, drawn in C. The ids
are the same bits as before (the kernel's CSPRNG, never a seeded generator: a request id may
name a request's result to its client, so it must not be guessable from another's).

The batch is the process's, as the kernel's random source is: a child made by `fork` (server
workers) drops what it inherited before it draws (`os.register_at_fork`), so no two processes
hand out the same ids. Threads may draw at once: taking an item from the list's iterator is
atomic under the GIL, and two threads that both find the batch spent each make their own.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

__all__ = ["IDS", "RandomIds", "fresh_id"]

BYTES = 12  # 96 bits an id
WIDTH = 2 * BYTES  # its hex characters


class RandomIds:
    """Ids from `os.urandom`, `batch` at a time: a batch is one hex text, and `ids` cuts it
    into ids as they are drawn (a `map` of its slices, in C: ~200 instructions an id, where a
    list built by a comprehension was ~400 an id, amortised)."""

    __slots__ = ("_cuts", "batch", "ids")

    def __init__(self, batch: int = 256) -> None:
        self.batch = batch
        self._cuts = tuple(slice(at, at + WIDTH) for at in range(0, WIDTH * batch, WIDTH))
        self.ids: Iterator[str] = iter(())

    def fresh(self) -> str:
        found = next(self.ids, None)
        return found if found is not None else self.refill()

    def refill(self) -> str:
        """A new batch (the last one is spent); returns its first id."""
        text = os.urandom(BYTES * self.batch).hex()
        self.ids = ids = map(text.__getitem__, self._cuts)
        return next(ids)

    def forget(self) -> None:
        """Drop the ids not yet handed out (a forked child: they are its parent's too)."""
        self.ids = iter(())


# The process's ids (module docstring: reset in a forked child). `gateway.request_id_for`
# draws from `IDS.ids` itself, without `fresh`'s frame (~400 instructions a request).
IDS = RandomIds()
os.register_at_fork(after_in_child=IDS.forget)
fresh_id = IDS.fresh
