"""`CellMap`: which KV cells each sequence holds, for the scheduler's accounting of the pool.

llama.cpp's unified KV pool gives each cell a position and a set of sequence ids. Copying a
prefix from one sequence to another (`llama_memory_seq_cp`) adds the second id to the same
cells, so the two share them, and a cell is free again once no sequence holds it. The
scheduler keeps a finished request's cells in its slot for later prompts that share its tokens;
to know how many cells those kept sequences alone hold (what evicting them would free), it
mirrors the pool here without touching it.

A cell is named by the block it was computed in and its position. A sequence holds spans
(block, start, end): a copied prefix is the source's spans cut at its length, and the
positions a sequence computes itself go to a block of its own. After a trim the positions past
the cut may be computed again as new cells, so the next growth starts a new block.

Pure and engine-thread only; tested against a cell-by-cell model of the pool.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Span:
    block: int
    start: int
    end: int


class CellMap:
    def __init__(self) -> None:
        self._spans: dict[int, list[Span]] = {}
        self._open: dict[int, int] = {}  # sequence -> the block its growth may extend
        self._blocks = itertools.count()

    def length(self, seq: int) -> int:
        """How many positions (from 0) the sequence holds."""
        spans = self._spans.get(seq)
        return spans[-1].end if spans else 0

    def grow(self, seq: int, length: int) -> None:
        """The sequence now holds positions up to `length`; those past its end are new cells."""
        end = self.length(seq)
        if length <= end:
            return
        spans = self._spans.setdefault(seq, [])
        block = self._open.get(seq)
        if block is not None and spans and spans[-1].block == block:
            spans[-1] = Span(block, spans[-1].start, length)
            return
        block = self._open[seq] = next(self._blocks)
        spans.append(Span(block, end, length))

    def trim(self, seq: int, length: int) -> None:
        """Drop the sequence's positions from `length` on."""
        spans = self._spans.get(seq, [])
        kept = [Span(s.block, s.start, min(s.end, length)) for s in spans if s.start < length]
        self._spans[seq] = kept
        self._open.pop(seq, None)

    def copy(self, source: int, target: int, length: int) -> None:
        """Give `target` (emptied first) the source's first `length` positions, shared."""
        self.drop(target)
        spans = [s for s in self._spans.get(source, []) if s.start < length]
        self._spans[target] = [Span(s.block, s.start, min(s.end, length)) for s in spans]

    def drop(self, seq: int) -> None:
        self._spans.pop(seq, None)
        self._open.pop(seq, None)

    def cells(self, seqs: Iterable[int]) -> int:
        """How many distinct cells the given sequences hold between them."""
        by_block: dict[int, list[tuple[int, int]]] = {}
        for seq in set(seqs):
            for span in self._spans.get(seq, []):
                by_block.setdefault(span.block, []).append((span.start, span.end))
        total = 0
        for intervals in by_block.values():
            reach = -1
            for start, end in sorted(intervals):
                if end > reach:
                    total += end - max(start, reach)
                    reach = end
        return total
