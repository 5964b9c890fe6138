"""The semantic cache's threshold gate (policies/cache_threshold.py): what a row says at each
threshold, and the choice's invariants over random verifications."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from levergate.policies.cache_threshold import (
    Verification,
    candidates,
    choose,
    point,
    refusals,
    wilson,
)

similarities = st.one_of(st.none(), st.floats(0.5, 1.0).map(lambda x: round(x, 3)))
results = st.sampled_from(["agree", "disagree", "failed", "none"])
floors = st.sampled_from([0.8, 0.85, 0.9])
rows = st.lists(st.builds(Verification, similarities, floors, results), max_size=120)
targets = st.floats(0.0, 0.5)
minimums = st.integers(1, 30)


def test_a_row_hits_at_every_threshold_up_to_its_similarity_and_only_from_its_floor() -> None:
    found = [Verification(0.93, 0.85, "agree"), Verification(0.88, 0.85, "disagree"),
             Verification(None, 0.85, "none"), Verification(0.97, 0.9, "agree")]  # fmt: skip
    at_85 = point(found, 0.85)
    assert (at_85.lookups, at_85.hits, at_85.verified, at_85.false_hits) == (3, 2, 2, 1)
    at_90 = point(found, 0.9)  # the fourth row speaks from 0.9 up
    assert (at_90.lookups, at_90.hits, at_90.verified, at_90.false_hits) == (4, 2, 2, 0)
    assert at_90.hit_rate == 0.5
    assert at_90.false_hit_rate == 0.0
    assert point(found, 0.8).lookups == 0  # no row was checked that far down
    assert point(found, 0.8).false_hit_rate is None


def test_the_lowest_threshold_within_the_target_is_chosen() -> None:
    found = [Verification(s, 0.8, "disagree" if s < 0.85 else "agree")
             for s in (0.81, 0.82, 0.86, 0.87, 0.9, 0.95)]  # fmt: skip
    chosen = choose(found, target=0.0, min_verified=3)
    assert chosen is not None
    assert chosen.threshold == 0.86
    lenient = choose(found, target=0.2, min_verified=3)
    assert lenient is not None
    assert lenient.threshold == 0.82  # 1 false hit in 5: 20%
    assert choose(found, target=0.0, min_verified=5) is None  # 4 verified at 0.86


def test_a_named_threshold_above_the_target_is_refused_naming_it() -> None:
    found = [Verification(0.83, 0.8, "disagree")] + [Verification(0.9, 0.8, "agree")] * 9
    reasons = refusals(point(found, 0.82), target=0.05, min_verified=5)
    assert reasons == [("threshold 0.8200 has a measured false-hit rate of 10.00%, above the "
                       "target 5.00%")]  # fmt: skip
    few = refusals(point(found, 0.95), target=0.05, min_verified=5)
    assert few == [("threshold 0.9500 has 0 verified would-be hits; at least 5 are needed "
                   "(--min-verifications)")]  # fmt: skip
    assert refusals(point(found, 0.85), target=0.05, min_verified=5) == []


def test_the_upper_bound_is_stricter_than_the_estimate() -> None:
    found = [Verification(0.9, 0.8, "agree")] * 50
    assert choose(found, target=0.02, min_verified=10) is not None
    assert choose(found, target=0.02, min_verified=10, upper=True) is None  # 0/50: up to 7.1%
    assert choose([*found] * 4, target=0.02, min_verified=10, upper=True) is not None  # 0/200


@given(rows, targets, targets, minimums)
def test_a_higher_target_never_gives_a_higher_threshold(
    found: list[Verification], low: float, high: float, least: int
) -> None:
    low, high = sorted((low, high))
    strict = choose(found, target=low, min_verified=least)
    lenient = choose(found, target=high, min_verified=least)
    if strict is not None:
        assert lenient is not None
        assert lenient.threshold <= strict.threshold


@given(rows, targets, minimums, st.booleans())
def test_the_choice_is_within_the_target_on_enough_verifications(
    found: list[Verification], target: float, least: int, upper: bool
) -> None:
    chosen = choose(found, target=target, min_verified=least, upper=upper)
    if chosen is None:  # then no candidate qualifies
        for threshold in candidates(found):
            at = point(found, threshold)
            rate = at.measured(upper=upper)
            assert at.verified < least or rate is None or rate > target
        return
    assert chosen.verified >= least
    rate = chosen.measured(upper=upper)
    assert rate is not None
    assert rate <= target + 1e-12
    assert refusals(chosen, target=target, min_verified=least, upper=upper) == []
    # nothing lower would have done
    for threshold in candidates(found):
        if threshold < chosen.threshold:
            at = point(found, threshold)
            lower = at.measured(upper=upper)
            assert at.verified < least or lower is None or lower > target


@given(rows, st.floats(0.5, 1.0), st.floats(0.5, 1.0))
def test_hits_and_verifications_only_shrink_as_the_threshold_rises(
    found: list[Verification], a: float, b: float
) -> None:
    low, high = sorted((a, b))
    below, above = point(found, low), point(found, high)
    speaking = [r for r in found if r.floor <= low]  # rows that speak for both
    assert point(speaking, high).hits <= below.hits
    assert point(speaking, high).verified <= below.verified
    assert above.lookups >= below.lookups  # more rows' floors are under a higher threshold


@given(st.integers(0, 500), st.integers(1, 500))
def test_the_wilson_interval_holds_the_estimate(k: int, n: int) -> None:
    k = min(k, n)
    low, high = wilson(k, n)
    assert 0.0 <= low <= k / n <= high <= 1.0


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="min_verified"):
        choose([], target=0.1, min_verified=0)
    with pytest.raises(ValueError, match="wilson"):
        wilson(3, 2)
