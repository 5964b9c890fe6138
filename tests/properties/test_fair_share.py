"""Water-filling shares: never more slots than free, never a tenant past the cap, and max-min
fair — a tenant given a slot never ends with more in flight than one left below the cap with
fewer (off by one at most); equal tenants take turns as the rotation moves."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from levergate.policies.fair_share import line_slots, rotated, shares

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


@given(
    concurrency=st.integers(1, 512),
    share=st.floats(0.001, 1.0),
    steps=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 600)), min_size=1, max_size=40),
)
def test_line_slots_yield_to_interactive_requests_and_take_the_slots_back(
    concurrency: int, share: float, steps: list[tuple[int, int]]
) -> None:
    """A runner claiming `line_slots` each round, while client requests come and go and lines
    finish: never past `concurrency`; while any client request is in flight, no claim takes
    the lines past the yielded bound (at least one line still runs); with none, every slot is
    taken again at once."""
    yielded = max(1, int(concurrency * share))
    in_flight = 0
    for interactive, finished in steps:
        in_flight -= min(in_flight, finished)
        got = line_slots(concurrency=concurrency, in_flight=in_flight, interactive=interactive,
                         share=share)  # fmt: skip
        assert got >= 0
        if interactive:
            assert got == max(0, yielded - in_flight)
            assert got <= line_slots(concurrency=concurrency, in_flight=in_flight,
                                     interactive=0, share=share)  # fmt: skip
            if in_flight == 0:
                assert got >= 1  # batches never stop altogether
        else:
            assert in_flight + got == concurrency
        in_flight += got
        assert in_flight <= concurrency
