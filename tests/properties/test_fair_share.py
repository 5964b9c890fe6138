"""Water-filling shares: never more slots than free, never a tenant past the cap, and max-min
fair — a tenant given a slot never ends with more in flight than one left below the cap with
fewer (off by one at most); equal tenants take turns as the rotation moves."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from levergate.policies.fair_share import rotated, shares

TENANTS = st.lists(st.sampled_from("abcdefgh"), min_size=0, max_size=8, unique=True)


@given(free=st.integers(0, 300), waiting=TENANTS, cap=st.integers(1, 64),
       held=st.lists(st.integers(0, 80), min_size=8, max_size=8))  # fmt: skip
def test_shares_are_bounded_and_max_min_fair(
    free: int, waiting: list[str], cap: int, held: list[int]
) -> None:
    inflight = dict(zip("abcdefgh", held, strict=True))
    got = shares(free=free, waiting=waiting, inflight=inflight, cap=cap)
    assert sum(got.values()) <= free
    assert set(got) <= set(waiting)
    after = {t: inflight[t] + got.get(t, 0) for t in waiting}
    for tenant, n in got.items():
        assert n > 0
        assert after[tenant] <= cap
    room = [t for t in waiting if after[t] < cap]
    if room:  # slots left unused only when every waiting tenant is at the cap
        assert sum(got.values()) == free
    for given_to in got:
        for other in room:
            assert after[given_to] <= after[other] + 1


def test_equal_tenants_take_turns() -> None:
    firsts = [next(iter(shares(free=1, waiting=rotated(["a", "b", "c"], turn), inflight={},
                               cap=10))) for turn in range(6)]  # fmt: skip
    assert firsts == ["a", "b", "c", "a", "b", "c"]
