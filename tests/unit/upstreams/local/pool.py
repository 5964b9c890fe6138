"""llama.cpp's unified KV pool modelled cell by cell, for the tests of the pool's bookkeeping
(`CellMap`) and of the scheduler's reuse: each cell a position, the token computed there and
the set of sequences holding it, with the semantics of `llama_memory_seq_rm` / `seq_cp` and
the per-sequence state save and restore (a state here is the sequence's tokens).

Where cells go is modelled too (llama.cpp 0.3.36's `src/llama-kv-cache.cpp`), because every
step attends over the pool up to its highest cell in use (`get_n_kv` pads `used_max_p1`):
`find_slot` takes each ubatch's cells one by one, the first free ones from `head` on (wrapping
to 0), after moving `head` back to 0 when more than twice the ubatch's cells lie free below it;
`apply_ubatch` leaves `head` just past the last cell taken; `seq_rm` moves `head` down to the
first cell it frees. A state restore places its cells the same way."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np


@dataclass(slots=True)
class Cell:
    pos: int
    token: int
    seqs: set[int] = field(default_factory=set)


class Pool:
    def __init__(self, size: int = 1024, *, ubatch: int = 512) -> None:
        self.size = size
        self.ubatch = ubatch
        self.cells: list[Cell | None] = [None] * size
        self.head = 0

    def compute(self, seq: int, start: int, tokens: Iterable[int]) -> None:
        """New cells for `tokens` at positions `start`..., which must continue the sequence
        and fit in the pool (llama_decode would fail: the scheduler must never ask that)."""
        assert self.length(seq) == start, (seq, self.length(seq), start)
        fed = list(tokens)
        for first in range(0, len(fed), self.ubatch):
            count = min(self.ubatch, len(fed) - first)
            for i, index in enumerate(self._find_slot(count), start=first):
                self.cells[index] = Cell(start + i, fed[i], {seq})
                self.head = index + 1

    def _find_slot(self, n_tokens: int) -> list[int]:
        head = 0 if self.head > self.occupied() + 2 * n_tokens else self.head
        found: list[int] = []
        tested = 0
        while len(found) < n_tokens:
            assert tested < self.size, "the pool overflowed"
            if head >= self.size:
                head = 0
            if self.cells[head] is None:
                found.append(head)
            head += 1
            tested += 1
        return found

    def forget(self, seq: int, start: int = 0) -> None:
        freed = self.size
        for index, cell in enumerate(self.cells):
            if cell is not None and cell.pos >= start and seq in cell.seqs:
                cell.seqs.discard(seq)
                if not cell.seqs:
                    self.cells[index] = None
                    freed = min(freed, index)
        self.head = min(self.head, freed)

    def share(self, source: int, target: int, length: int) -> None:
        for cell in self.cells:
            if cell is not None and source in cell.seqs and cell.pos < length:
                cell.seqs.add(target)

    def save(self, seq: int) -> bytearray:
        return bytearray(np.asarray(self.held(seq), dtype=np.int32).tobytes())

    def load(self, seq: int, state: bytearray) -> bool:
        self.forget(seq)
        self.compute(seq, 0, np.frombuffer(bytes(state), dtype=np.int32).tolist())
        return True

    def held(self, seq: int) -> list[int]:
        """The sequence's tokens by position (positions 0... with no gap, or it fails)."""
        mine = sorted((c.pos, c.token) for c in self.cells if c is not None and seq in c.seqs)
        assert [pos for pos, _ in mine] == list(range(len(mine))), mine
        return [token for _, token in mine]

    def length(self, seq: int) -> int:
        return len(self.held(seq))

    def shared(self, a: int, b: int) -> bool:
        """Whether the two sequences hold a cell together."""
        return any(c is not None and {a, b} <= c.seqs for c in self.cells)

    def occupied(self, seqs: Iterable[int] | None = None) -> int:
        """Cells in use (by any of `seqs`, when given)."""
        wanted = None if seqs is None else set(seqs)
        return sum(1 for c in self.cells if c is not None and (wanted is None or c.seqs & wanted))

    def used_max_p1(self) -> int:
        """One past the highest cell in use: what a step attends over (before padding)."""
        return max((i + 1 for i, c in enumerate(self.cells) if c is not None), default=0)
