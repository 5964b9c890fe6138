"""How SQLite's request log binds a batch (requestlog/binds.py): each column left out, bound once
or bound in every row, every value read back as written whichever set of modes wrote it, and
the sets compiled stay few however the batches vary."""

from __future__ import annotations

import random
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from levergate.requestlog import binds
from levergate.requestlog.binds import NO_DEFAULT, Modes, Statements, modes_of
from levergate.requestlog.row import NAMES, row_of
from levergate.requestlog.store import SqliteLog
from tests.unit.requestlog.records import record

START = 1_700_000_000.0


def test_a_column_is_left_out_bound_once_or_bound_in_every_row() -> None:
    columns = [(1.0, 2.0), ("a", "a"), (0, 0), (None, None), (0, 5), ("x", "x")]
    defaults = [NO_DEFAULT, None, 0, None, 0, NO_DEFAULT]
    modes = modes_of(columns, defaults)
    # bits: 0 every row; 1 once ("a" is not its default); 2, 3 out; 4 every row; 5 once
    assert modes == Modes(bound=0b110011, each=0b010001)


def test_modes_fit_rows_that_need_no_more() -> None:
    own = Modes(bound=0b0111, each=0b0001)
    assert own.fits(own)
    assert own.fits(Modes(bound=0b0011, each=0b0001))  # a column left out: bound as default
    assert own.fits(Modes(bound=0b0011, each=0b0000))  # one value where it binds every row
    assert not own.fits(Modes(bound=0b1001, each=0b0001))  # a column it leaves out
    assert not own.fits(Modes(bound=0b0111, each=0b0011))  # every row where it binds once


def test_the_statement_names_the_values_bound_once_in_every_row() -> None:
    statement = Statements("t", ["a", "b", "c", "d"], limit=999).choose(
        Modes(bound=0b1011, each=0b1001)
    )
    assert statement.text(2) == "INSERT INTO t (a, b, d) VALUES (?2, ?1, ?3), (?, ?1, ?)"
    once, each = statement.values([(1, 2), ("b", "b"), (None, None), (7, 8)])
    assert (once, each) == (["b"], [1, 7, 2, 8])
    assert statement.most == min(binds.MULTI_ROWS, (999 - 1) // 2)


def varied(n: int, rng: random.Random) -> tuple[Any, ...]:
    """A row of mixed traffic: the tenant, model, tokens, errors and retries vary."""
    changes: dict[str, Any] = {"tenant": rng.choice(["a", "b"]), "retries": rng.choice([0, 0, 1])}
    if rng.random() < 0.3:
        changes.update(model=rng.choice(["m1", "m2"]), cost_usd=rng.choice([0.0, 0.5]))
    if rng.random() < 0.2:
        changes.update(error=None, outcome="ok", status=200)
    return row_of(START + n, record(n, **changes))


def _stored(path: Path) -> list[tuple[Any, ...]]:
    with closing(sqlite3.connect(path)) as conn:
        sql = f"SELECT {', '.join(NAMES)} FROM lg_requests ORDER BY seq"  # noqa: S608 - our names
        return conn.execute(sql).fetchall()


@settings(max_examples=20, deadline=None)
@given(st.lists(st.integers(1, 40), min_size=1, max_size=30), st.randoms(use_true_random=False))
def test_batches_of_any_mix_read_back_as_written(
    tmp_path_factory: Any, sizes: list[int], rng: random.Random
) -> None:
    """Whichever set of modes writes a batch (its own, one that fits, or the one binding every
    column), each row reads back as it was written, in order."""
    path = tmp_path_factory.mktemp("binds") / "log.db"
    store = SqliteLog(str(path), timeout_seconds=5)
    written: list[tuple[Any, ...]] = []
    try:
        for size in sizes:
            uniform = rng.random() < 0.3
            batch = [row_of(START + len(written) + i, record(1)) if uniform
                     else varied(len(written) + i, rng) for i in range(size)]  # fmt: skip
            store.write(batch)
            written += batch
    finally:
        store.close()
    assert _stored(path) == written


def test_batches_wanting_a_new_set_each_time_compile_one_in_compile_every() -> None:
    """Batches whose modes differ every time: one set compiled for the first, then the one
    binding every column (which fits all), then one more at most every `COMPILE_EVERY`
    batches; the sets kept stay within `KEPT`."""
    width = 12
    statements = Statements("t", [f"c{i}" for i in range(width)], limit=32766)
    made: set[int] = set()
    batches = 200
    for n in range(batches):
        each = n % (1 << width) | 1
        made.add(id(statements.choose(Modes(bound=(1 << width) - 1, each=each))))
        assert len(statements._kept) <= binds.KEPT
    assert len(made) <= 2 + batches // binds.COMPILE_EVERY


def test_uniform_batches_use_their_own_set() -> None:
    """A steady traffic's batches, after one of another shape: their own set, compiled once."""
    statements = Statements("t", ["a", "b", "c"], limit=999)
    statements.choose(Modes(bound=0b111, each=0b111))
    steady = Modes(bound=0b111, each=0b001)
    chosen = {id(statements.choose(steady)) for _ in range(3 * binds.COMPILE_EVERY)}
    assert len(chosen) == 2  # a fitting one at first, then its own
    assert statements.choose(steady).modes == steady
