"""The cost-quality curve and the threshold for a target quality, against brute force."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from levergate.routing.curve import curve, measured, random_saving

rows = st.lists(
    st.tuples(st.integers(-3, 3).map(float), st.booleans(), st.booleans()), min_size=1, max_size=40
)


def split(data: list[tuple[float, bool, bool]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    scores, cheap, strong = zip(*data, strict=True)
    return np.array(scores), np.array(cheap, dtype=float), np.array(strong, dtype=float)


def test_a_worked_example() -> None:
    # Rows: (score, cheap right, strong right). Strong 3/4, cheap 1/4.
    scores = np.array([0.9, 0.5, 0.5, 0.1])
    cheap = np.array([0.0, 0.0, 1.0, 0.0])
    strong = np.array([1.0, 1.0, 1.0, 0.0])
    c = curve(scores, cheap, strong)
    # Ties at 0.5 move together: points at 0, 1, 3 and 4 strong calls.
    assert c.strong_share.tolist() == [0.0, 0.25, 0.75, 1.0]
    assert c.quality.tolist() == [0.25, 0.5, 0.75, 0.75]
    assert c.threshold_for(0.6) == 0.9  # 0.5 / 0.75 = 67% retention with one strong call
    assert c.saving_at(1.0) == 0.25
    assert c.threshold_for(1.0) == 0.5
    assert measured(scores, cheap, strong, 0.5) == (1.0, 0.75)
    assert c.threshold_for(0.0) > 0.9  # nothing needs the strong model


@given(rows, st.floats(0.0, 1.0))
def test_threshold_for_is_the_cheapest_that_reaches_the_target(
    data: list[tuple[float, bool, bool]], target: float
) -> None:
    scores, cheap, strong = split(data)
    c = curve(scores, cheap, strong)
    threshold = c.threshold_for(target)
    kept, share = measured(scores, cheap, strong, threshold)
    reachable = []
    for t in [*np.unique(scores), scores.max() + 1]:
        k, s = measured(scores, cheap, strong, float(t))
        if k >= target - 1e-12:
            reachable.append(s)
    if reachable:
        assert kept >= target - 1e-12
        assert share == pytest.approx(min(reachable))
    else:  # unreachable: everything goes strong
        assert share == 1.0
    assert 0.0 <= c.saving_at(target) <= 1.0


def test_random_routing_is_linear() -> None:
    cheap = np.array([1.0] * 68 + [0.0] * 32)
    strong = np.array([1.0] * 80 + [0.0] * 20)
    # 95% of 0.8 = 0.76: the strong share p with 0.68 + 0.12 p = 0.76 is 2/3.
    assert random_saving(cheap, strong, 0.95) == pytest.approx(1 / 3)
    assert random_saving(cheap, strong, 0.8) == 1.0
    assert random_saving(strong, cheap, 0.99) == 1.0


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="one length"):
        curve(np.zeros(2), np.zeros(3), np.zeros(2))
