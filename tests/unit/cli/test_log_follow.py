"""`levergate log tail`'s Follow: records whose sequence numbers commit out of order (PostgreSQL
with several replicas) are each shown once, and a number that never commits is given up."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from levergate.cli.log import Follow


def records(*seqs: int) -> list[dict[str, Any]]:
    return [{"seq": s} for s in seqs]


def shown(found: list[dict[str, Any]]) -> list[int]:
    return [int(r["seq"]) for r in found]


def test_a_record_committed_below_one_shown_is_still_shown() -> None:
    follow = Follow(10, grace=30)
    assert shown(follow.fresh(records(11, 13), now=0)) == [11, 13]
    assert follow.floor == 11  # 12 is awaited
    assert shown(follow.fresh(records(12, 13), now=1)) == [12]
    assert follow.floor == 13


def test_a_number_that_never_commits_is_given_up_after_the_grace() -> None:
    follow = Follow(0, grace=30)
    follow.fresh(records(2), now=0)
    assert follow.floor == 0
    follow.fresh(records(2), now=29)
    assert follow.floor == 0
    follow.fresh(records(2), now=30)
    assert follow.floor == 2
    assert shown(follow.fresh(records(1, 2, 3), now=31)) == [3]  # 1 came too late: below it


def test_gaps_are_bounded() -> None:
    follow = Follow(0, grace=30, max_gaps=5)
    follow.fresh(records(100), now=0)
    assert follow.floor == 94  # only 95..99 are awaited


@given(st.lists(st.integers(1, 60), unique=True, min_size=1), st.data())
def test_every_record_is_shown_once_whatever_the_commit_order(
    order: list[int], data: st.DataObject
) -> None:
    """Records commit in `order` over polls within the grace; each poll reads every committed
    record above the floor, as `tail` does. Every record is shown exactly once."""
    follow = Follow(0, grace=1_000)
    committed: list[int] = []
    seen: list[int] = []
    rest = list(order)
    now = 0.0
    while rest:
        take = data.draw(st.integers(1, len(rest)))
        committed += rest[:take]
        rest = rest[take:]
        now += 1
        above = records(*sorted(s for s in committed if s > follow.floor))
        seen += shown(follow.fresh(above, now=now))
    assert sorted(seen) == sorted(order)
    assert len(seen) == len(set(seen))
