"""How SQLite's request log binds a batch of rows (store.py `SqliteLog.write`): each column of
the batch is left out, bound once for the whole statement, or bound in every row.

Binding a value is work per value in sqlite3 and SQLite (`bind_param`, `sqlite3_bind_text`
copying the text, the connection's mutex taken and given back, the value's memory), and a row
binds ~25 values. Most columns hold one value in every row of a batch (the kind, the origin,
the status and outcome, the priority and tier, the schema; the tenant, model and upstream of a
gateway serving one), so:
- a column at its default (NULL or 0) in every row is left out, its DEFAULT fills it (`OUT`);
- a column holding one value in every row is bound once: a numbered parameter (`?3`) that every
  row of the statement names (`ONCE`);
- the rest are bound in every row (`EACH`).
Counted (callgrind, the in-process benchmark's rows, 500 a batch): 36.8k instructions a row
inserted with the columns at their default left out and the rest bound in every row, 22.8k
with the columns of one value bound once.

A set of modes (`Modes`) is an INSERT text of its own, compiled by SQLite once per statement
size (store.py `chunk_sizes`) and kept by sqlite3 (its statement cache: 128 statements per
connection). Compiling costs more than binding saves (~6 us a row of the statement: a batch of
500 of the tests' rows compiled in ~3 ms, ~73 ms while every row's parameters were numbered,
`Statement.text`), so
`Statements.choose` keeps the sets few: the batch's own set when it was compiled already; else,
unless none was compiled in the last `COMPILE_EVERY` batches, a compiled set that fits it
(`fits`: binds at least what the batch needs) and binds the fewest values a row, or the set
binding every column in every row, which fits any; else its own is compiled. So batches whose
sets differ every time (small batches of mixed traffic) compile at most one set in
`COMPILE_EVERY` batches (besides the one fitting everything), where binding only the columns
that vary compiled a set per batch. At most `KEPT` sets are kept, the least recently used
going, so that their statements stay within sqlite3's cache.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain
from typing import Any, NamedTuple

__all__ = ["COMPILE_EVERY", "KEPT", "MULTI_ROWS", "NO_DEFAULT", "Modes", "Statement",
           "Statements", "modes_of"]  # fmt: skip

MULTI_ROWS = 1000  # rows per INSERT statement at most (within SQLite's bound on parameters)
COMPILE_EVERY = 16  # batches: a set that another compiled one could serve waits this long
# Sets kept: each has a statement per size (at most 11: `MULTI_ROWS` and the powers of two under
# it), all within sqlite3's cache of 128 with the labels' few.
KEPT = 8
# A column default no value equals: the column is never left out.
NO_DEFAULT = object()


class Modes(NamedTuple):
    """Which columns are bound (bit i: column i), and of those which in every row; the others
    bound are bound once. A column not bound is left out."""

    bound: int
    each: int

    def fits(self, wanted: Modes) -> bool:
        """Whether rows needing `wanted` can be written with these modes: every column they
        bind is bound here, every column they bind in every row too (a column left out may be
        bound, as its default; one of one value may be bound in every row)."""
        return not (wanted.bound & ~self.bound or wanted.each & ~self.each)


def modes_of(columns: Sequence[Sequence[Any]], defaults: Sequence[object]) -> Modes:
    """The modes a batch needs: `columns` are its values by column (each as long as the batch,
    non-empty), `defaults` each column's default (`NO_DEFAULT`: none). `count` compares
    identity first, so a column of one object (None, a name, the same 0.0) costs a pointer a
    row."""
    bound = each = 0
    bit = 1
    for column, default in zip(columns, defaults, strict=True):
        first = column[0]
        # The last first: a column that varies (the time, the id, the latencies) mostly
        # differs there, without comparing the rest.
        if column[-1] != first or column.count(first) != len(column):
            bound |= bit
            each |= bit
        elif default is NO_DEFAULT or first != default:
            bound |= bit
        bit <<= 1
    return Modes(bound, each)


class Statement:
    """The INSERT of one set of modes: its text for each statement size, and the values of a
    batch's rows for it."""

    def __init__(self, table: str, names: Sequence[str], modes: Modes, *, limit: int) -> None:
        """`limit`: the most parameters a statement may have (SQLite's)."""
        self.modes = modes
        bits = range(len(names))
        self._once = [i for i in bits if modes.bound >> i & 1 and not modes.each >> i & 1]
        self._each = [i for i in bits if modes.each >> i & 1]
        self.width = len(self._each)  # values bound a row
        self.most = min(MULTI_ROWS, max(1, (limit - len(self._once)) // max(1, self.width)))
        self._head = (f"INSERT INTO {table} "
                      f"({', '.join(n for i, n in enumerate(names) if modes.bound >> i & 1)}) "
                      "VALUES ")  # fmt: skip
        self._texts: dict[int, str] = {}

    def text(self, size: int) -> str:
        """The statement of `size` rows: the parameters bound once are ?1 to ?k (in column
        order), each row's follow: numbered in the first row, plain `?` after it (SQLite gives
        a `?` the next number, the same). SQLite compiling a numbered parameter it has seen
        before (a `?1` in every row) looks it up in the list of the numbered ones so far, one by
        one: with every row's numbered too, compiling a batch of 500 rows was quadratic (perf:
        `sqlite3VListNumToName`, ~12 ms of a run's CPU); with plain ones after the first row the
        list is one row's."""
        found = self._texts.get(size)
        if found is None:
            once = {column: n for n, column in enumerate(self._once, 1)}
            bound = sorted((*self._once, *self._each))
            rows = []
            at = len(once) + 1
            for n in range(size):
                names = []
                for column in bound:
                    if column in once:
                        names.append(f"?{once[column]}")
                    else:
                        names.append(f"?{at}" if n == 0 else "?")
                        at += 1
                rows.append(f"({', '.join(names)})")
            found = self._texts[size] = self._head + ", ".join(rows)
        return found

    def values(self, columns: Sequence[Sequence[Any]]) -> tuple[list[Any], list[Any]]:
        """The values bound once, and the rows' values (row by row) of a batch by column."""
        once = [columns[i][0] for i in self._once]
        rows = list(chain.from_iterable(zip(*[columns[i] for i in self._each], strict=True)))
        return once, rows


class Statements:
    """The sets of modes compiled, and which one a batch is written with (module docstring)."""

    def __init__(self, table: str, names: Sequence[str], *, limit: int) -> None:
        self._table = table
        self._names = tuple(names)
        self._limit = limit
        self._kept: dict[Modes, Statement] = {}
        self._since = COMPILE_EVERY  # batches since a set was compiled
        everything = (1 << len(names)) - 1
        self._any = Modes(everything, everything)

    def choose(self, wanted: Modes) -> Statement:
        kept = self._kept
        found = kept.pop(wanted, None)
        if found is None and self._since < COMPILE_EVERY:
            fitting = [s for s in kept.values() if s.modes.fits(wanted)]
            found = (min(fitting, key=lambda s: s.width) if fitting else
                     kept.pop(self._any, None) or self._compiled(self._any))  # fmt: skip
            kept.pop(found.modes, None)
        if found is None:
            found = self._compiled(wanted)
        if len(kept) >= KEPT:
            del kept[next(iter(kept))]  # the least recently used
        kept[found.modes] = found
        self._since += 1
        return found

    def _compiled(self, modes: Modes) -> Statement:
        self._since = 0
        return Statement(self._table, self._names, modes, limit=self._limit)
