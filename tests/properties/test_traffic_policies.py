"""Invariants of the traffic policies: GCRA's sliding-window guarantee, backoff bounds, the retry
budget's cap, ejection's state machine, AIMD's bounds and the balancers' choices."""

from __future__ import annotations

import bisect
import random

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from levergate.policies import balancing, gcra
from levergate.policies.aimd import Aimd
from levergate.policies.backoff import FullJitter, parse_duration
from levergate.policies.budget import RetryBudget
from levergate.policies.ejection import Ejection, EjectionPolicy, State
from levergate.policies.ewma import Ewma
from levergate.simulator.limits import format_duration

gaps = st.lists(st.floats(min_value=0, max_value=3, allow_nan=False), min_size=1, max_size=300)


def _max_in_window(times: list[float], costs: list[float], window: float) -> float:
    """The most units admitted in any half-open window (t - window, t], as a provider counts."""
    best = 0.0
    for end, t in enumerate(times):
        start = bisect.bisect_right(times, t - window)
        best = max(best, sum(costs[start : end + 1]))
    return best


def _admitted(rate: gcra.Rate, arrivals: list[float]) -> list[float]:
    """When each arrival (gaps between them) GCRA admitted at one unit of cost."""
    tat: float | None = None
    now = 0.0
    admitted: list[float] = []
    for gap in arrivals:
        now += gap
        step = gcra.check(tat=tat, now=now, cost=1, rate=rate)
        if step.admitted:
            tat = step.tat
            admitted.append(now)
    return admitted


@settings(max_examples=200, deadline=None)
@given(
    limit=st.integers(min_value=1, max_value=60),
    burst_share=st.floats(min_value=0, max_value=1),
    arrivals=gaps,
)
def test_gcra_never_admits_more_than_the_limit_in_any_window(
    limit: int, burst_share: float, arrivals: list[float]
) -> None:
    rate = gcra.Rate.per_window(limit=limit, window=10.0, burst_share=burst_share)
    admitted = _admitted(rate, arrivals)
    assert _max_in_window(admitted, [1.0] * len(admitted), 10.0) <= limit


@settings(max_examples=200, deadline=None)
@given(
    limit=st.integers(min_value=1, max_value=60),
    burst_share=st.floats(min_value=0, max_value=1),
    margin=st.floats(min_value=0, max_value=0.49),
    arrivals=gaps,
)
def test_gcra_with_a_margin_keeps_late_slots_and_still_the_limit_in_any_window(
    limit: int, burst_share: float, margin: float, arrivals: list[float]
) -> None:
    """The slack (half the margin) lets a late arrival keep its slot: the window guarantee
    holds for any arrival times, late ones included."""
    rate = gcra.Rate.per_window(limit=limit, window=10.0, burst_share=burst_share, margin=margin)
    admitted = _admitted(rate, arrivals)
    assert _max_in_window(admitted, [1.0] * len(admitted), 10.0) <= limit


@settings(max_examples=100, deadline=None)
@given(
    limit=st.integers(min_value=2, max_value=600),
    margin=st.floats(min_value=0.001, max_value=0.2),
    lateness=st.lists(st.floats(min_value=0, max_value=1), min_size=20, max_size=200),
)
def test_a_waiter_late_by_up_to_the_slack_loses_no_throughput(
    limit: int, margin: float, lateness: list[float]
) -> None:
    """A backlog served by waiters that each come back after their slot (timers fire late):
    up to `slack` late, the schedule does not slip, so n admissions take n intervals. Plain
    GCRA (no margin, no slack) slips by every lateness."""
    rate = gcra.Rate.per_window(limit=limit, window=60.0, margin=margin)
    tat: float | None = None
    now = 0.0
    for share in lateness:
        step = gcra.check(tat=tat, now=now, cost=1, rate=rate)
        while not step.admitted:  # told to wait: come back late by up to the slack
            now += step.wait + share * rate.slack
            step = gcra.check(tat=tat, now=now, cost=1, rate=rate)
        tat = step.tat
    first = gcra.check(tat=None, now=0.0, cost=1, rate=rate).tat
    assert tat is not None
    assert tat <= first + (len(lateness) - 1) * rate.interval + 1e-6 * len(lateness)


@settings(max_examples=150, deadline=None)
@given(
    limit=st.integers(min_value=100, max_value=5000),
    costs=st.lists(st.integers(min_value=1, max_value=50), min_size=1, max_size=200),
    arrivals=gaps,
)
def test_gcra_token_charges_up_to_the_burst_stay_under_the_limit(
    limit: int, costs: list[int], arrivals: list[float]
) -> None:
    rate = gcra.Rate.per_window(limit=limit, window=10.0, burst_share=0.02)
    assume(max(costs) <= rate.burst)
    tat: float | None = None
    now = 0.0
    times: list[float] = []
    spent: list[float] = []
    for gap, cost in zip(arrivals, costs, strict=False):
        now += gap
        step = gcra.check(tat=tat, now=now, cost=cost, rate=rate)
        if step.admitted:
            tat = step.tat
            times.append(now)
            spent.append(cost)
    assert _max_in_window(times, spent, 10.0) <= limit


@given(limit=st.integers(min_value=1, max_value=1000))
def test_gcra_sustains_the_full_rate_when_asked_continuously(limit: int) -> None:
    rate = gcra.Rate.per_window(limit=limit, window=60.0)
    tat: float | None = None
    admitted = 0
    for tick in range(int(limit * 3)):
        step = gcra.check(tat=tat, now=tick * 180.0 / (limit * 3), cost=1, rate=rate)
        if step.admitted:
            tat, admitted = step.tat, admitted + 1
    # Three windows' worth of time admits about three windows' worth of requests.
    assert admitted >= 3 * limit - 3


@given(
    wait_after=st.floats(min_value=0, max_value=100),
    refund=st.floats(min_value=0, max_value=1000),
)
def test_gcra_refunds_never_become_credit(wait_after: float, refund: float) -> None:
    rate = gcra.Rate.per_window(limit=10, window=1.0)
    tat = gcra.check(tat=None, now=0.0, cost=1, rate=rate).tat
    now = wait_after
    after = gcra.adjusted(tat=tat, now=now, delta=-refund, rate=rate)
    assert after is None or after >= now


@given(
    attempt=st.integers(min_value=0, max_value=200),
    floor=st.floats(min_value=0, max_value=100),
    seed=st.integers(),
)
def test_full_jitter_stays_between_the_floor_and_the_cap(
    attempt: int, floor: float, seed: int
) -> None:
    policy = FullJitter(base=0.1, cap=5.0)
    delay = policy.delay(attempt, rng=random.Random(seed), floor=floor)
    assert floor <= delay <= max(floor, 5.0)
    assert policy.ceiling(attempt) <= policy.ceiling(attempt + 1) <= 5.0


@given(seconds=st.floats(min_value=0, max_value=100_000, allow_nan=False))
def test_reset_durations_parse_back_to_at_least_what_was_meant(seconds: float) -> None:
    parsed = parse_duration(format_duration(seconds))
    assert parsed is not None
    assert seconds - 1e-5 <= parsed <= seconds + 0.0011  # the format rounds to 10 us


@given(
    ratio=st.floats(min_value=0, max_value=1),
    floor=st.floats(min_value=0, max_value=5),
    deposits=st.integers(min_value=0, max_value=500),
    tries=st.integers(min_value=0, max_value=500),
)
def test_retry_budget_caps_retries_at_the_share_plus_the_floor(
    ratio: float, floor: float, deposits: int, tries: int
) -> None:
    budget = RetryBudget(ratio=ratio, min_per_second=floor, ttl=10.0)
    for _ in range(deposits):
        budget.deposit(now=1.0)
    granted = sum(budget.withdraw(now=1.5) for _ in range(tries))
    assert granted <= floor * 10.0 + ratio * deposits
    assert granted >= min(tries, int(floor * 10.0 + ratio * deposits))


def test_retry_budget_forgets_traffic_older_than_its_ttl() -> None:
    budget = RetryBudget(ratio=0.5, min_per_second=0.0, ttl=10.0)
    for _ in range(10):
        budget.deposit(now=0.0)
    assert budget.balance(now=5.0) == 5.0
    assert budget.balance(now=25.0) == 0.0


@given(outcomes=st.lists(st.booleans(), max_size=200), step=st.floats(min_value=0, max_value=20))
def test_ejection_time_grows_and_is_capped(outcomes: list[bool], step: float) -> None:
    policy = EjectionPolicy(consecutive_failures=3, base_seconds=10, max_seconds=40)
    health = Ejection(policy=policy)
    now = 0.0
    last = 0.0
    for ok in outcomes:
        now += step
        if not health.available(now):
            continue
        health.begin(now)
        before = health.ejections
        state = health.success(now) if ok else health.failure(now)
        if state is State.EJECTED and health.ejections > before:
            length = health.ejected_until - now  # float subtraction: compare within 1e-9
            assert length <= 40 + 1e-9
            assert length >= last - 1e-9 or health.ejections == 1
            last = length


def test_half_open_lets_one_probe_through_and_its_outcome_decides() -> None:
    health = Ejection(policy=EjectionPolicy(consecutive_failures=2, base_seconds=10))
    health.failure(0.0)
    assert health.failure(0.0) is State.EJECTED
    assert not health.available(5.0)
    assert health.available(10.0)
    health.begin(10.0)
    assert not health.available(10.0)  # the probe is out
    assert health.failure(10.0) is State.EJECTED
    assert health.ejected_until == 30.0  # second ejection: twice as long
    health.begin(30.0)
    assert health.success(30.0) is State.HEALTHY
    assert health.available(30.0)


@given(events=st.lists(st.tuples(st.booleans(), st.integers(0, 2000)), max_size=300))
def test_aimd_stays_within_its_bounds(events: list[tuple[bool, int]]) -> None:
    aimd = Aimd(initial=20, minimum=2, maximum=100)
    for ok, in_flight in events:
        if ok:
            aimd.success(in_flight=in_flight)
        else:
            aimd.drop()
        assert 2 <= aimd.limit <= 100


loads = st.builds(
    balancing.Load,
    weight=st.floats(min_value=0.01, max_value=100),
    outstanding=st.integers(0, 100),
    queued_tokens=st.floats(0, 1e6),
    ttft=st.floats(0, 100),
    tokens_per_second=st.floats(0, 1e4),
    wait=st.floats(0, 100),
    headroom=st.floats(0, 1),
)


@given(candidates=st.lists(loads, min_size=1, max_size=10), seed=st.integers())
def test_balancers_pick_a_candidate(candidates: list[balancing.Load], seed: int) -> None:
    rng = random.Random(seed)
    for index in (
        balancing.pick_weighted([c.weight for c in candidates], rng=rng),
        balancing.pick_least_outstanding(candidates, rng=rng),
        balancing.pick_p2c(
            [c.weight for c in candidates], candidates.__getitem__, own_tokens=100, rng=rng
        ),
    ):
        assert 0 <= index < len(candidates)


@given(a=loads, b=loads, seed=st.integers())
def test_p2c_between_two_keeps_the_one_predicted_to_finish_first(
    a: balancing.Load, b: balancing.Load, seed: int
) -> None:
    pair = [a, b]
    chosen = balancing.pick_p2c(
        [a.weight, b.weight], pair.__getitem__, own_tokens=50, rng=random.Random(seed)
    )
    scores = [balancing.predicted_seconds(x, own_tokens=50) for x in (a, b)]
    assert scores[chosen] == min(scores)


@given(samples=st.lists(st.floats(0, 1000), min_size=1, max_size=50), tau=st.floats(0.1, 100))
def test_ewma_stays_within_the_samples(samples: list[float], tau: float) -> None:
    average = Ewma(tau=tau)
    for i, sample in enumerate(samples):
        average.observe(sample, now=float(i))
    assert min(samples) - 1e-6 <= average.value() <= max(samples) + 1e-6
