"""llama.cpp's unified KV pool modelled cell by cell, for the tests of the pool's bookkeeping
(`CellMap`) and of the scheduler's reuse: each cell a position, the token computed there and
the set of sequences holding it, with the semantics of `llama_memory_seq_rm` / `seq_cp` and
the per-sequence state save and restore (a state here is the sequence's tokens)."""

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
    def __init__(self, size: int = 1 << 30) -> None:
        self.size = size
        self.cells: list[Cell] = []

    def compute(self, seq: int, start: int, tokens: Iterable[int]) -> None:
        """New cells for `tokens` at positions `start`..., which must continue the sequence
        and fit in the pool (llama_decode would fail: the scheduler must never ask that)."""
        assert self.length(seq) == start, (seq, self.length(seq), start)
        self.cells.extend(Cell(start + i, t, {seq}) for i, t in enumerate(tokens))
        assert len(self.cells) <= self.size, "the pool overflowed"

    def forget(self, seq: int, start: int = 0) -> None:
        for cell in self.cells:
            if cell.pos >= start:
                cell.seqs.discard(seq)
        self.cells = [cell for cell in self.cells if cell.seqs]

    def share(self, source: int, target: int, length: int) -> None:
        for cell in self.cells:
            if source in cell.seqs and cell.pos < length:
                cell.seqs.add(target)

    def save(self, seq: int) -> bytearray:
        return bytearray(np.asarray(self.held(seq), dtype=np.int32).tobytes())

    def load(self, seq: int, state: bytearray) -> bool:
        self.forget(seq)
        self.compute(seq, 0, np.frombuffer(bytes(state), dtype=np.int32).tolist())
        return True

    def held(self, seq: int) -> list[int]:
        """The sequence's tokens by position (positions 0... with no gap, or it fails)."""
        mine = sorted((c.pos, c.token) for c in self.cells if seq in c.seqs)
        assert [pos for pos, _ in mine] == list(range(len(mine))), mine
        return [token for _, token in mine]

    def length(self, seq: int) -> int:
        return len(self.held(seq))

    def occupied(self, seqs: Iterable[int] | None = None) -> int:
        """Cells in use (by any of `seqs`, when given)."""
        if seqs is None:
            return len(self.cells)
        wanted = set(seqs)
        return sum(1 for cell in self.cells if cell.seqs & wanted)
