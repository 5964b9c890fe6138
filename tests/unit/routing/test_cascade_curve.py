"""A cascade's confidence curve: a table worked by hand, and its invariants against brute force."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from levergate.policies.confidence import Verdict
from levergate.routing.cascade_curve import (
    cascade_curve,
    escalate,
    measured,
    oracle_escalation,
    oracle_point,
    random_escalation,
)

# (score, cheap right, strong right): cheap 2/5 = 0.4, strong 4/5 = 0.8.
TABLE = [(-2.0, 0, 1), (-1.0, 0, 0), (-1.0, 1, 1), (-0.5, 0, 1), (-0.1, 1, 1)]
SCORES = np.array([r[0] for r in TABLE])
CHEAP = np.array([float(r[1]) for r in TABLE])
STRONG = np.array([float(r[2]) for r in TABLE])

rows = st.lists(
    st.tuples(st.integers(-3, 3).map(float), st.booleans(), st.booleans()), min_size=1, max_size=40
)


def split(data: list[tuple[float, bool, bool]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    scores, cheap, strong = zip(*data, strict=True)
    return np.array(scores), np.array(cheap, dtype=float), np.array(strong, dtype=float)


def test_the_worked_table() -> None:
    c = cascade_curve(SCORES, CHEAP, STRONG)
    # Ascending scores; the two rows at -1.0 escalate together. Escalating the first row (the
    # cheap model wrong, the strong right) adds one answer, the tied pair none, the 4th one.
    assert c.escalation.tolist() == [0.0, 0.2, 0.6, 0.8, 1.0]
    assert c.quality.tolist() == pytest.approx([0.4, 0.6, 0.6, 0.8, 0.8])
    assert c.retention.tolist() == pytest.approx([0.5, 0.75, 0.75, 1.0, 1.0])
    assert c.thresholds[:4].tolist() == [-2.0, -1.0, -0.5, -0.1]
    assert -0.1 < c.thresholds[4] < -0.0999999  # just above the highest score
    assert c.saving.tolist() == pytest.approx([1.0, 0.8, 0.4, 0.2, 0.0])
    assert (c.escalation_at(0.95), c.threshold_for(0.95)) == (0.8, -0.1)
    assert (c.escalation_at(0.7), c.threshold_for(0.7)) == (0.2, -1.0)
    assert c.escalation_at(0.5) == 0.0
    # A score equal to the threshold passes, as a cascade's check: at -1.0 only row 1 escalates.
    assert escalate(SCORES, -1.0).tolist() == [True, False, False, False, False]
    assert measured(SCORES, CHEAP, STRONG, -1.0) == pytest.approx((0.75, 0.2))
    assert measured(SCORES, CHEAP, STRONG, -0.5) == pytest.approx((0.75, 0.6))
    # Random: 0.4 + 0.4 p = 0.95 x 0.8 gives p = 0.9. The oracle: 0.76 x 5 - 2 = 1.8 answers
    # short, so two of the wrong cheap answers the strong model gets right (rows 1 and 4).
    assert random_escalation(CHEAP, STRONG, 0.95) == pytest.approx(0.9)
    assert oracle_escalation(CHEAP, STRONG, 0.95) == pytest.approx(0.4)
    assert oracle_escalation(CHEAP, STRONG, 0.7) == pytest.approx(0.2)
    assert oracle_escalation(CHEAP, STRONG, 0.5) == 0.0
    # Escalating exactly the wrong cheap answers (rows 1, 2, 4): 3/5, and 4/5 correct.
    assert oracle_point(CHEAP, STRONG) == pytest.approx((1.0, 0.6))


def test_the_cheap_call_is_paid_on_every_row() -> None:
    c = cascade_curve(SCORES, CHEAP, STRONG, cheap_cost=0.1)
    assert c.saving.tolist() == pytest.approx([0.9, 0.7, 0.3, 0.1, -0.1])


def test_the_comparison_is_the_cascade_checks() -> None:
    for score, threshold in [(-1.0, -1.0), (-1.0, -0.99), (0.7, 0.7), (0.69, 0.7)]:
        verdict = Verdict.scored("mean_logprob", score, threshold)
        assert bool(escalate(np.array([score]), threshold)[0]) is not verdict.passed


@given(rows, st.sampled_from([0.0, 0.05, 0.5]))
def test_the_curve_is_well_formed(data: list[tuple[float, bool, bool]], cost: float) -> None:
    scores, cheap, strong = split(data)
    c = cascade_curve(scores, cheap, strong, cheap_cost=cost)
    assert c.escalation[0] == 0.0
    assert c.escalation[-1] == 1.0
    assert (np.diff(c.escalation) > 0).all()
    assert (np.diff(c.thresholds) > 0).all()
    assert (np.diff(c.saving) < 0).all()  # every step escalates more, so saves less
    assert c.saving[0] == pytest.approx(1 - cost)
    assert c.quality[0] == pytest.approx(cheap.mean())
    assert c.quality[-1] == pytest.approx(strong.mean())
    if strong.any():
        assert c.retention[0] == pytest.approx(cheap.mean() / strong.mean())
        assert c.retention[-1] == pytest.approx(1.0)
    for t, share, quality in zip(c.thresholds, c.escalation, c.quality, strict=True):
        kept, sent = measured(scores, cheap, strong, float(t))
        assert sent == pytest.approx(share)  # each point's threshold reproduces it
        if strong.any():
            assert kept == pytest.approx(quality / strong.mean())


@given(rows, st.floats(0.01, 1.0))
def test_the_target_picks_the_lowest_escalation_and_the_oracle_bounds_it(
    data: list[tuple[float, bool, bool]], target: float
) -> None:
    scores, cheap, strong = split(data)
    c = cascade_curve(scores, cheap, strong)
    kept, share = measured(scores, cheap, strong, c.threshold_for(target))
    if not strong.any():  # no retention to reach (the command refuses such a file)
        assert share == 1.0
        return
    candidates = [*np.unique(scores), np.nextafter(scores.max(), np.inf)]
    reaching = []
    for t in candidates:
        k, s = measured(scores, cheap, strong, float(t))
        if k >= target - 1e-12:
            reaching.append(s)
    assert reaching  # escalating everything keeps all of the strong model's quality
    assert kept >= target - 1e-12
    assert share == pytest.approx(min(reaching))
    oracle = oracle_escalation(cheap, strong, target)
    assert oracle <= share + 1e-12
    # Random escalation is an expectation (fractions of rows); the oracle counts whole rows.
    assert oracle <= random_escalation(cheap, strong, target) + 1 / len(cheap) + 1e-9
    # Escalating that many helpful rows does reach the target.
    helpful = np.flatnonzero((cheap == 0) & (strong == 1))[: round(oracle * len(cheap))]
    quality = cheap.sum() + len(helpful)
    assert quality / strong.sum() >= target - 1e-9


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="one length"):
        cascade_curve(np.zeros(2), np.zeros(3), np.zeros(2))
    with pytest.raises(ValueError, match="finite"):
        cascade_curve(np.array([0.0, np.nan]), np.zeros(2), np.zeros(2))
    with pytest.raises(ValueError, match="cheap_cost"):
        cascade_curve(np.zeros(2), np.zeros(2), np.zeros(2), cheap_cost=1.0)
