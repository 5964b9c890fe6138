"""The SQLite limit store: GCRA shared by the processes of one machine (`serve --workers N`),
checked against the in-memory store it must agree with, and all-or-nothing like Redis's."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from levergate.policies.gcra import Rate
from levergate.stores.limits import Charge, MemoryLimitStore, StoreUnavailable
from levergate.stores.limits_sqlite import SqliteLimitStore
from levergate.testing import ManualClock


async def test_two_processes_on_one_file_share_one_limit(tmp_path: Path) -> None:
    clock = ManualClock()
    path = tmp_path / "limits.sqlite3"
    one = SqliteLimitStore(path, busy_timeout=1.0, now=clock.now)
    two = SqliteLimitStore(path, busy_timeout=1.0, now=clock.now)
    charge = [Charge("key:rpm", 1, Rate(limit=5, window=60.0, burst=5))]
    try:
        waits = await asyncio.gather(*(s.acquire(charge) for s in (one, two) * 6))
        assert sum(1 for w in waits if w == 0) == 5
        wait = await one.acquire(charge)
        assert wait > 0
        clock.advance(wait)
        assert await two.acquire(charge) == 0
    finally:
        await one.aclose()
        await two.aclose()


async def test_a_refused_charge_spends_nothing_and_a_refund_frees_room(tmp_path: Path) -> None:
    clock = ManualClock()
    store = SqliteLimitStore(tmp_path / "l.sqlite3", busy_timeout=1.0, now=clock.now)
    tight, roomy = Rate(limit=1, window=60.0), Rate(limit=1, window=60.0)
    try:
        assert await store.acquire([Charge("tight", 1, tight)]) == 0
        assert await store.acquire([Charge("roomy", 1, roomy), Charge("tight", 1, tight)]) > 0
        assert await store.acquire([Charge("roomy", 1, roomy)]) == 0  # untouched by the refusal
        await store.adjust([Charge("tight", -1, tight)])
        assert await store.acquire([Charge("tight", 1, tight)], commit=False) == 0
    finally:
        await store.aclose()


@pytest.mark.parametrize("seed", range(5))
async def test_it_decides_as_the_in_memory_store_does(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    clock = ManualClock()
    memory = MemoryLimitStore(clock=clock)
    sqlite = SqliteLimitStore(tmp_path / "l.sqlite3", busy_timeout=1.0, now=clock.now)
    rates = {"a": Rate(limit=10, window=1.0, burst=3), "b": Rate(limit=100, window=5.0, burst=50)}
    try:
        for _ in range(200):
            clock.advance(rng.choice((0.0, 0.01, 0.2)))
            charges = [Charge(k, rng.choice((1, 2, 5)), rates[k]) for k in rng.sample("ab", 2)]
            if rng.random() < 0.2:
                await memory.adjust(charges)
                await sqlite.adjust(charges)
                continue
            commit = rng.random() < 0.9
            expected = await memory.acquire(charges, commit=commit)
            assert await sqlite.acquire(charges, commit=commit) == pytest.approx(expected)
    finally:
        await sqlite.aclose()


async def test_a_file_that_cannot_be_opened_is_unavailable_not_an_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    store = SqliteLimitStore(tmp_path / "file" / "l.sqlite3", busy_timeout=0.1)
    try:
        with pytest.raises(StoreUnavailable):
            await store.acquire([Charge("k", 1, Rate(limit=1, window=1.0))])
    finally:
        await store.aclose()
