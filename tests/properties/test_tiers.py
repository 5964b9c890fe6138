"""Invariants of the tier policy (policies/tiers.py): the choice is always a tier the request may
use; when some tier meets the deadline the choice does and nothing that meets it is cheaper in
expectation; more time never costs more; no deadline is standard; a tier the provider refuses
is chosen only with a rescue in time; and the latency estimate grows with size and confidence."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from levergate.policies.tiers import (
    IN_TIME,
    NO_DEADLINE,
    Ask,
    LatencyPrior,
    Option,
    Samples,
    Tier,
    choose,
    estimate,
)

seconds = st.floats(min_value=0, max_value=1e5, allow_nan=False)
dollars = st.floats(min_value=0, max_value=10, allow_nan=False)
shares = st.one_of(st.just(0.0), st.floats(min_value=0, max_value=1, allow_nan=False))


@st.composite
def options(draw: st.DrawFn) -> list[Option]:
    """Standard always; the others each maybe, with any cost, latency, wait and refusals."""
    found = [Option(Tier.STANDARD, draw(dollars), draw(seconds), draw(seconds), 0.0)]
    others = [t for t in (Tier.FLEX, Tier.PRIORITY, Tier.BATCH) if draw(st.booleans())]
    found += [Option(t, draw(dollars), draw(seconds), draw(seconds), draw(shares)) for t in others]
    return found


asks = st.builds(
    Ask,
    st.one_of(st.none(), seconds),
    st.booleans(),
    st.sampled_from([Tier.FLEX, Tier.STANDARD, Tier.PRIORITY]),
)


def allowed(option: Option, ask: Ask) -> bool:
    return option.tier.rank <= ask.ceiling.rank and (
        option.tier is not Tier.PRIORITY or ask.interactive
    )


def may(option: Option, ask: Ask, found: list[Option]) -> bool:
    """Allowed, or standard when the ceiling leaves nothing priced."""
    if any(allowed(o, ask) for o in found):
        return allowed(option, ask)
    return option.tier is Tier.STANDARD


def expected(option: Option, found: list[Option], ask: Ask) -> float | None:
    """The option's expected cost when it meets the deadline (None when it does not)."""
    assert ask.remaining is not None
    if option.done_by > ask.remaining:
        return None
    if option.refusals <= 0:
        return option.cost
    rescues = [r.cost for r in found if may(r, ask, found) and r.tier.rank > option.tier.rank
               and r.refusals <= 0 and r.done_by <= ask.remaining]  # fmt: skip
    if not rescues:
        return None
    return (1 - option.refusals) * option.cost + option.refusals * min(rescues)


@given(options(), asks)
def test_the_choice_is_a_tier_the_request_may_use(found: list[Option], ask: Ask) -> None:
    choice = choose(found, ask)
    chosen = next(o for o in found if o.tier is choice.tier)
    assert may(chosen, ask, found)


@given(options(), asks)
def test_in_time_the_choice_is_the_cheapest_in_expectation(found: list[Option], ask: Ask) -> None:
    choice = choose(found, ask)
    if ask.remaining is None:
        assert choice.reason == NO_DEADLINE
        assert choice.tier is Tier.STANDARD or ask.ceiling.rank < Tier.STANDARD.rank
        return
    costs = [c for o in found if may(o, ask, found) and (c := expected(o, found, ask)) is not None]
    if not costs:
        assert not choice.fits
        return
    assert choice.fits
    assert choice.reason == IN_TIME
    assert math.isclose(choice.expected_cost, min(costs), rel_tol=1e-9, abs_tol=1e-12)


@given(options(), asks, seconds)
def test_more_time_never_costs_more(found: list[Option], ask: Ask, more: float) -> None:
    if ask.remaining is None:
        return
    sooner = choose(found, ask)
    later = choose(found, Ask(ask.remaining + more, ask.interactive, ask.ceiling))
    if sooner.fits:
        assert later.fits
        assert later.expected_cost <= sooner.expected_cost + 1e-12


@given(options(), asks)
def test_a_refused_tier_is_chosen_only_with_a_rescue_in_time(found: list[Option], ask: Ask) -> None:
    choice = choose(found, ask)
    chosen = next(o for o in found if o.tier is choice.tier)
    if choice.fits and chosen.refusals > 0 and ask.remaining is not None:
        assert any(r.tier.rank > chosen.tier.rank and r.refusals <= 0 and may(r, ask, found)
                   and r.done_by <= ask.remaining for r in found)  # fmt: skip


@given(options(), st.one_of(st.none(), seconds))
def test_priority_serves_only_interactive_requests(found: list[Option], left: float | None) -> None:
    ask = Ask(left, interactive=False, ceiling=Tier.PRIORITY)
    assert choose(found, ask).tier is not Tier.PRIORITY


priors = st.builds(
    LatencyPrior,
    st.floats(min_value=0.01, max_value=100),
    st.floats(min_value=0, max_value=100),
    st.floats(min_value=0, max_value=100),
    st.floats(min_value=0, max_value=2),
)
sizes = st.tuples(st.integers(0, 10**6), st.integers(0, 10**6), st.integers(0, 10**6))
confidences = st.tuples(st.floats(min_value=0.51, max_value=0.99),
                        st.floats(min_value=0.51, max_value=0.99))  # fmt: skip


@given(priors, sizes, confidences)
def test_the_prior_estimate_grows_with_size_and_confidence(
    prior: LatencyPrior, size: tuple[int, int, int], qs: tuple[float, float]
) -> None:
    prompt, output, more = size
    low, high = sorted(qs)

    def at(p: int, o: int, q: float) -> float:
        return estimate(prior, None, prompt=p, output=o, confidence=q, min_samples=1)

    assert at(prompt, output, low) <= at(prompt + more, output, low) + 1e-9
    assert at(prompt, output, low) <= at(prompt, output + more, low) + 1e-9
    assert at(prompt, output, low) <= at(prompt, output, high) + 1e-9


@given(st.lists(st.floats(min_value=0, max_value=1e3), min_size=1, max_size=300),
       st.floats(min_value=0.51, max_value=0.99))  # fmt: skip
def test_the_observed_quantile_is_a_sample_at_or_above_its_share(
    ratios: list[float], q: float
) -> None:
    samples = Samples(1000)
    for ratio in ratios:
        samples.add(ratio)
    found = samples.quantile(q)
    assert found in ratios
    assert sum(r <= found for r in ratios) >= q * len(ratios) - 1e-9


def test_observations_replace_the_prior_once_there_are_enough() -> None:
    prior = LatencyPrior(10.0, spread=1.0)
    samples = Samples(100)
    for _ in range(4):
        samples.add(0.5)
    sized = {"prompt": 0, "output": 0, "confidence": 0.9, "min_samples": 5}
    assert estimate(prior, samples, **sized) > 10.0  # type: ignore[arg-type]
    samples.add(0.5)
    assert estimate(prior, samples, **sized) == 5.0  # type: ignore[arg-type]
