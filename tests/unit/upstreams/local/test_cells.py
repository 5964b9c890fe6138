"""`CellMap` against the pool modelled cell by cell: after any sequence of computing, trimming,
copying and dropping sequences, it counts the cells any set of sequences holds between them
exactly as the pool does (shared prefixes once, a trimmed tail recomputed as new cells)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from levergate.upstreams.local.cells import CellMap
from tests.unit.upstreams.local.pool import Pool

SEQS = 4
seq_ids = st.integers(0, SEQS - 1)
lengths = st.integers(0, 12)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("grow"), seq_ids, lengths),
        st.tuples(st.just("trim"), seq_ids, lengths),
        st.tuples(st.just("copy"), seq_ids, seq_ids, lengths),
        st.tuples(st.just("drop"), seq_ids),
    ),
    max_size=30,
)


def apply(cells: CellMap, pool: Pool, operation: tuple[object, ...]) -> None:
    match operation:
        case ("grow", int(seq), int(length)):
            start = pool.length(seq)
            cells.grow(seq, length)
            pool.compute(seq, start, range(start, max(start, length)))
        case ("trim", int(seq), int(length)):
            cells.trim(seq, length)
            pool.forget(seq, length)
        case ("copy", int(source), int(target), int(length)) if source != target:
            cells.copy(source, target, length)
            pool.forget(target)
            pool.share(source, target, length)
        case ("drop", int(seq)):
            cells.drop(seq)
            pool.forget(seq)


@given(operations, st.lists(st.sets(seq_ids), min_size=1, max_size=4))
def test_the_map_counts_the_cells_the_pool_holds(
    ops: list[tuple[object, ...]], queries: list[set[int]]
) -> None:
    cells, pool = CellMap(), Pool()
    for operation in ops:
        apply(cells, pool, operation)
        for seq in range(SEQS):
            assert cells.length(seq) == pool.length(seq)
    for seqs in [*queries, set(range(SEQS))]:
        assert cells.cells(seqs) == pool.occupied(seqs)


def test_a_copied_prefix_is_counted_once_and_a_regrown_tail_twice() -> None:
    cells = CellMap()
    cells.grow(0, 10)
    cells.copy(0, 1, 6)
    cells.grow(1, 8)  # two cells of its own past the shared six
    assert cells.cells([0, 1]) == 12
    cells.trim(0, 4)  # 0's cells past 5 are free; positions 4 and 5 stay, held by 1 alone
    assert cells.cells([0, 1]) == 8
    cells.grow(0, 6)  # ...and 0 computes its own 4 and 5 again: new cells
    assert cells.cells([0]) == 6
    assert cells.cells([1]) == 8
    assert cells.cells([0, 1]) == 10
