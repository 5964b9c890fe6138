"""Properties of the usage split: shares are whole, add up to the bill, and each is within one
token of its exact proportional share."""

from __future__ import annotations

from fractions import Fraction

from hypothesis import given
from hypothesis import strategies as st

from levergate.policies.prorate import prorate


@given(total=st.integers(0, 10**7), weights=st.lists(st.integers(0, 10**5), max_size=50))
def test_shares_add_up_and_stay_within_one_of_exact(total: int, weights: list[int]) -> None:
    shares = prorate(total, weights)
    assert len(shares) == len(weights)
    if not weights:
        return
    assert sum(shares) == total
    basis = weights if sum(weights) else [1] * len(weights)
    for share, weight in zip(shares, basis, strict=True):
        assert abs(share - Fraction(total * weight, sum(basis))) < 1
