"""Request ids drawn in batches (core/ids.py): the same shape as `os.urandom(12).hex()`, never
repeated within a process, across a batch's end, or between a forked child and its parent."""

from __future__ import annotations

import os
import re
import sys

import pytest

from levergate.core.ids import RandomIds, fresh_id
from levergate.gateway import request_id_for

HEX24 = re.compile(r"[0-9a-f]{24}")


def test_ids_are_96_random_bits_in_hex_and_do_not_repeat_across_batches() -> None:
    source = RandomIds(batch=4)
    drawn = [source.fresh() for _ in range(4 * 50 + 3)]
    assert all(HEX24.fullmatch(i) for i in drawn)
    assert len(set(drawn)) == len(drawn)


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
    assert draws == [96, 96, 96]


def test_forget_drops_the_ids_not_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    draws = iter(range(1, 100))
    monkeypatch.setattr(os, "urandom", lambda n: bytes([next(draws)]) * n)
    source = RandomIds(batch=8)
    assert source.fresh() == "01" * 12
    assert source.fresh() == "01" * 12  # the rest of the first draw
    source.forget()
    assert source.fresh() == "02" * 12  # a new draw, none of the first one's


def test_the_request_id_is_the_clients_when_safe_else_fresh() -> None:
    assert request_id_for({"x-request-id": "abc-123"}) == "abc-123"
    assert HEX24.fullmatch(request_id_for({"x-request-id": "bad id\r\n"}))
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
