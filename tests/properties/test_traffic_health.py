"""Invariants of the health verdict (hysteresis over probe outcomes) and of the evidence
weight the latency-outlier check rests on."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from levergate.policies.ewma import Ewma
from levergate.policies.health import CheckPolicy, Verdict

thresholds = st.integers(min_value=1, max_value=5)


def reference(outcomes: list[bool], policy: CheckPolicy) -> list[bool]:
    """Down after `unhealthy` failures in a row while up; up after `healthy` passes in a row
    while down — written as a scan over the trailing run of equal outcomes."""
    down, run, verdicts = False, 0, []
    for i, passed in enumerate(outcomes):
        run = run + 1 if i and outcomes[i - 1] == passed else 1
        if down and passed and run >= policy.healthy_threshold:
            down, run = False, 0
        elif not down and not passed and run >= policy.unhealthy_threshold:
            down, run = True, 0
        verdicts.append(down)
    return verdicts


@given(st.lists(st.booleans(), max_size=60), thresholds, thresholds)
def test_the_verdict_matches_a_scan_of_the_outcomes(
    outcomes: list[bool], unhealthy: int, healthy: int
) -> None:
    policy = CheckPolicy(unhealthy_threshold=unhealthy, healthy_threshold=healthy)
    verdict, seen = Verdict(), []
    for passed in outcomes:
        verdict = verdict.after(passed=passed, policy=policy)
        seen.append(verdict.down)
    assert seen == reference(outcomes, policy)


@given(st.lists(st.booleans(), max_size=60), thresholds, thresholds)
def test_a_flip_needs_a_full_streak_of_contrary_probes(
    outcomes: list[bool], unhealthy: int, healthy: int
) -> None:
    policy = CheckPolicy(unhealthy_threshold=unhealthy, healthy_threshold=healthy)
    verdict = Verdict()
    for i, passed in enumerate(outcomes):
        after = verdict.after(passed=passed, policy=policy)
        if after.down != verdict.down:
            needed = healthy if verdict.down else unhealthy
            streak = outcomes[max(0, i - needed + 1) : i + 1]
            assert len(streak) == needed
            assert all(p == passed for p in streak)
        verdict = after


@given(
    st.lists(
        st.tuples(st.floats(0, 30, allow_nan=False), st.floats(0, 100, allow_nan=False)),
        min_size=1,
        max_size=50,
    ),
    st.floats(0.1, 60),
)
def test_the_evidence_weight_is_a_decayed_count(
    samples: list[tuple[float, float]], tau: float
) -> None:
    average, now = Ewma(tau=tau), 0.0
    for gap, value in samples:
        now += gap
        average.observe(value, now=now)
    weight = average.weight(now)
    # Never more than the samples seen, never less than the latest one.
    assert 1.0 - 1e-9 <= weight <= len(samples) + 1e-9
    # It decays with time like the samples' share of the average.
    later = average.weight(now + tau)
    assert math.isclose(later, weight / math.e, rel_tol=1e-9)
    # Samples at one instant count in full.
    if all(gap == 0 for gap, _ in samples[1:]):
        assert math.isclose(weight, len(samples), rel_tol=1e-9)
