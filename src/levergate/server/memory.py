"""Giving memory back after large requests (`levergate serve` only: a library user's process
keeps its own allocator's habits).

CPython hands the memory of large objects (request bodies, parsed JSON, answers) to glibc's
malloc, and glibc keeps freed pages for reuse unless they sit at the very top of a heap. After a
burst of large requests the gateway therefore stayed at its high-water mark: four clients' 6 MB
chat bodies and 67 MB embeddings answers left it at 1,660 MiB after 8 s idle, where it had
started at 70; `MALLOC_ARENA_MAX=2` did not help (1,518); one `malloc_trim(0)` brought it to
355, and this trimmer keeps it at 520 (benchmarks/results/memory_highwater.md).

So a serving process asks malloc every `server.memory_trim_every_seconds` how much it holds
free (`mallinfo2`, ~0.1 ms) and, when that grew by more than `server.memory_trim_above_mib`
over the least it held since its last trim, calls `malloc_trim(0)` in a worker thread. ctypes
releases the GIL for it; glibc locks each arena while it hands that arena's free pages back, so
the event loop can wait on an allocation for that long, once after a burst (a 230 MB heap:
~90 ms; nothing left to give back: ~1 ms). Without glibc 2.33+ (musl, macOS) it does nothing.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
import os
from collections.abc import Callable
from pathlib import Path

from levergate.core.clock import Clock

_MALLINFO2 = ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
              "uordblks", "fordblks", "keepcost")  # fmt: skip


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in _MALLINFO2]


log = logging.getLogger("levergate.server")
MIB = 1024 * 1024


def resident_bytes() -> int | None:
    """This process's resident set (Linux /proc), or None where it cannot be read."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE")


def glibc() -> tuple[Callable[[], int], Callable[[], int]] | None:
    """glibc's (`malloc_trim(0)`, the bytes malloc holds free), or None without glibc 2.33+."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        trim, info = (libc.malloc_trim, libc.mallinfo2) if libc is not None else (None, None)
    except (OSError, AttributeError):
        return None
    if trim is None or info is None:
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    info.argtypes, info.restype = [], _Mallinfo2
    return (lambda: int(trim(0))), (lambda: int(info().fordblks))


class Trimmer:
    """The background loop: look every `every` seconds at `free` (the bytes malloc holds free),
    and trim when it grew by more than `above` over the least seen since the last trim."""

    def __init__(
        self,
        *,
        every: float,
        above: int,
        clock: Clock,
        trim: Callable[[], int],
        free: Callable[[], int],
    ) -> None:
        self._every = every
        self._above = above
        self._clock = clock
        self._trim = trim
        self._free = free
        self.trims = 0

    async def run(self) -> None:
        floor = self._free()
        while True:
            await self._clock.sleep(self._every)
            now = self._free()
            if now - floor <= self._above:
                floor = min(floor, now)
                continue
            before = resident_bytes()
            await asyncio.to_thread(self._trim)
            self.trims += 1
            after = resident_bytes()
            if before is not None and after is not None:
                log.debug("malloc_trim: %d -> %d MiB resident", before // MIB, after // MIB)
            # What malloc still counts free after the trim (its pages are given back) is the
            # new floor: no trim again until more is freed.
            floor = self._free()
