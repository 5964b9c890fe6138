"""Request ids drawn in batches (core/ids.py): 32 hex characters, the batch's time in ms then 80
random bits, growing with time, never repeated within a process, across a batch's end, or
between a forked child and its parent."""

from __future__ import annotations

import itertools
import os
import re
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from levergate.core.ids import RandomIds, fresh_id
from levergate.gateway import request_id_for

HEX32 = re.compile(r"[0-9a-f]{32}")


def test_ids_are_the_time_and_80_random_bits_in_hex_and_do_not_repeat_across_batches() -> None:
    source = RandomIds(batch=4)
    drawn = [source.fresh() for _ in range(4 * 50 + 3)]
    assert all(HEX32.fullmatch(i) for i in drawn)
    assert len(set(drawn)) == len(drawn)


def test_ids_grow_with_the_time_their_batch_was_drawn(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each byte where it belongs (the strided layout): the time's 6 big-endian, then the draw's
    10, the id's own bytes of it."""
    draws = iter(range(1, 100))
    monkeypatch.setattr(os, "urandom", lambda n: bytes(range(next(draws), 256))[:n])
    times = iter([0x0102030405FF, 0x010203040600])
    source = RandomIds(batch=3, now_ms=lambda: next(times))
    first = [source.fresh() for _ in range(3)]
    later = source.fresh()
    # the draw is 30 bytes 1, 2, ... 30: byte `at` of id `i` is the draw's `at * 3 + i`
    assert first[0] == "0102030405ff" + bytes(1 + at * 3 for at in range(10)).hex()
    assert first[2] == "0102030405ff" + bytes(3 + at * 3 for at in range(10)).hex()
    assert later.startswith("010203040600")
    assert all(i < later for i in first)


def test_a_batch_is_one_draw_from_the_os(monkeypatch: pytest.MonkeyPatch) -> None:
    draws: list[int] = []
    real = os.urandom

    def counted(n: int) -> bytes:
        draws.append(n)
        return real(n)

    monkeypatch.setattr(os, "urandom", counted)
    source = RandomIds(batch=8)
    for _ in range(17):
        source.fresh()
    assert draws == [80, 80, 80]


def test_forget_drops_the_ids_not_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    draws = iter(range(1, 100))
    monkeypatch.setattr(os, "urandom", lambda n: bytes([next(draws)]) * n)
    source = RandomIds(batch=8, now_ms=lambda: 7)
    assert source.fresh() == "000000000007" + "01" * 10
    assert source.fresh() == "000000000007" + "01" * 10  # the rest of the first draw
    source.forget()
    assert source.fresh() == "000000000007" + "02" * 10  # a new draw, none of the first one's


def test_the_request_id_is_the_clients_when_safe_else_fresh() -> None:
    assert request_id_for({"x-request-id": "abc-123"}) == "abc-123"
    assert HEX32.fullmatch(request_id_for({"x-request-id": "bad id\r\n"}))
    assert request_id_for({}) != request_id_for({})


@pytest.mark.skipif(not hasattr(os, "fork") or sys.platform == "darwin", reason="fork")
def test_a_forked_child_never_hands_out_its_parents_ids() -> None:
    fresh_id()  # a batch under way in the parent, inherited by the child
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        try:
            os.write(write, ",".join(fresh_id() for _ in range(300)).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        child = set(pipe.read().decode().split(","))
    os.waitpid(pid, 0)
    parent = {fresh_id() for _ in range(300)}
    assert len(child) == 300
    assert not parent & child


@given(
    batch=st.integers(min_value=1, max_value=8),
    steps=st.lists(st.integers(min_value=0, max_value=10**6), min_size=1, max_size=40),
)
def test_an_id_begins_with_its_batchs_time_and_ids_never_go_back(
    batch: int, steps: list[int]
) -> None:
    """Whatever the batch and however the clock advances (never back): each id's first 12 hex
    characters are the clock at its batch's draw, and ids drawn later sort after (or level
    with, in one batch, before their random part) the earlier ones."""
    times = iter(itertools.accumulate(steps, initial=1_796_000_000_000))
    read: list[int] = []

    def clock() -> int:
        read.append(next(times))
        return read[-1]

    source = RandomIds(batch=batch, now_ms=clock)
    drawn = [source.fresh() for _ in range(min(len(steps), 10) * batch)]
    heads = [int(i[:12], 16) for i in drawn]
    assert heads == [read[n // batch] for n in range(len(drawn))]
    assert heads == sorted(heads)
    assert all(HEX32.fullmatch(i) for i in drawn)
