"""KV states of recent prompts, kept within a byte budget, least recently used out first.

An entry is a prompt's tokens and the KV state the engine saved after computing them (KV only:
the logits of the last position are recomputed by decoding that one token again, which is why
a reuse never covers a whole prompt). A new prompt reuses the entry with the longest common
token prefix: the engine restores that state and drops the positions past the common part, so a
shared system prompt is reused even when the questions after it differ.

An entry whose tokens are a prefix of a newer entry's is dropped when the newer one arrives:
anything it would match, the newer matches at least as far (multi-turn chats keep one entry
per conversation, not one per turn). Past the RAM budget, entries go to an optional
`SpillStore` (a directory) with its own budget, and come back to RAM on their next hit.

Engine thread only; no locking. The states are opaque byte buffers here, so the accounting is tested
without a model.
"""

from __future__ import annotations

import contextlib
import itertools
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import numpy.typing as npt

Tokens = npt.NDArray[np.int32]


def common_prefix(a: Tokens, b: Tokens) -> int:
    """How many leading tokens `a` and `b` share."""
    n = min(len(a), len(b))
    if n == 0:
        return 0
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if len(differ) else n


class SpillStore(Protocol):
    def write(self, key: int, state: bytearray) -> None: ...

    def read(self, key: int) -> bytearray | None: ...

    def delete(self, key: int) -> None: ...


class DirectorySpill:
    """One file per spilled entry in `folder` (created on first use, emptied on start)."""

    def __init__(self, folder: Path) -> None:
        self._folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        for stale in folder.glob("*.kv"):
            with contextlib.suppress(OSError):
                stale.unlink()

    def write(self, key: int, state: bytearray) -> None:
        self._path(key).write_bytes(state)

    def read(self, key: int) -> bytearray | None:
        path = self._path(key)
        try:
            with path.open("rb") as handle:
                state = bytearray(path.stat().st_size)
                handle.readinto(state)
        except OSError:
            return None
        return state

    def delete(self, key: int) -> None:
        with contextlib.suppress(OSError):
            self._path(key).unlink()

    def _path(self, key: int) -> Path:
        return self._folder / f"{key}.kv"


@dataclass(slots=True)
class Entry:
    tokens: Tokens
    size: int
    state: bytearray | None  # None while spilled


@dataclass(frozen=True, slots=True)
class Match:
    key: int
    common: int


class PrefixCache:
    def __init__(
        self,
        *,
        ram_bytes: int,
        min_tokens: int,
        spill: SpillStore | None = None,
        spill_bytes: int = 0,
    ) -> None:
        self.ram_bytes = ram_bytes
        self.min_tokens = min_tokens
        self._spill = spill
        self._spill_bytes = spill_bytes if spill is not None else 0
        self._entries: OrderedDict[int, Entry] = OrderedDict()  # least recently used first
        self._keys = itertools.count()
        self.ram_used = 0
        self.spilled_used = 0

    def __len__(self) -> int:
        return len(self._entries)

    def match(self, tokens: Tokens, *, limit: int) -> Match | None:
        """The entry sharing the longest prefix with `tokens`, counted up to `limit`, if that
        is at least `min_tokens` long."""
        best: Match | None = None
        for key, entry in self._entries.items():
            common = min(common_prefix(entry.tokens, tokens), limit)
            if common >= self.min_tokens and (best is None or common > best.common):
                best = Match(key, common)
        return best

    def state(self, key: int) -> bytearray | None:
        """The entry's state, read back from the spill store if needed; marks it used."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        self._entries.move_to_end(key)
        if entry.state is None:
            state = self._spill.read(key) if self._spill is not None else None
            self._forget_spilled(key, entry)
            if state is None:
                del self._entries[key]
                return None
            entry.state = state
            self.ram_used += entry.size
            self._evict(keep=key)
        return entry.state

    def covers(self, tokens: Tokens) -> bool:
        """Whether some entry already holds all of `tokens` (so saving them adds nothing)."""
        return any(
            len(entry.tokens) >= len(tokens) and common_prefix(entry.tokens, tokens) == len(tokens)
            for entry in self._entries.values()
        )

    def put(self, tokens: Tokens, state: bytearray) -> None:
        """Keep `state` for `tokens`, unless too short, too big, or already covered."""
        if len(tokens) < self.min_tokens or len(state) > self.ram_bytes or self.covers(tokens):
            return
        for key, entry in list(self._entries.items()):
            if len(entry.tokens) <= len(tokens) and common_prefix(entry.tokens, tokens) == len(
                entry.tokens
            ):
                self._drop(key)
        key = next(self._keys)
        self._entries[key] = Entry(tokens=tokens.copy(), size=len(state), state=state)
        self.ram_used += len(state)
        self._evict(keep=key)

    def _evict(self, *, keep: int) -> None:
        """Move least recently used RAM entries to the spill store (or drop them) until the
        RAM budget holds; then drop spilled entries until the spill budget holds."""
        for key, entry in list(self._entries.items()):
            if self.ram_used <= self.ram_bytes:
                break
            if key == keep or entry.state is None:
                continue
            if self._spill is not None and entry.size <= self._spill_bytes:
                self._spill.write(key, entry.state)
                self.spilled_used += entry.size
                self.ram_used -= entry.size
                entry.state = None
            else:
                self._drop(key)
        for key, entry in list(self._entries.items()):
            if self.spilled_used <= self._spill_bytes:
                break
            if entry.state is None:
                self._drop(key)

    def _drop(self, key: int) -> None:
        entry = self._entries.pop(key)
        if entry.state is None:
            self._forget_spilled(key, entry)
        else:
            self.ram_used -= entry.size

    def _forget_spilled(self, key: int, entry: Entry) -> None:
        self.spilled_used -= entry.size
        if self._spill is not None:
            self._spill.delete(key)
