"""The breakpoint arithmetic, with the numbers worked by hand (Anthropic's rates: a 5-minute
write 1.25x the input price, a 1-hour write 2x, a read 0.1x)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from levergate.policies.prompt_cache import CacheRates, ReuseStats, Ttl, best_ttl, cost_per_request

RATES = CacheRates()


def test_worked_costs_per_request() -> None:
    # Half the requests reuse within 5 minutes: 0.5 x 0.1 + 0.5 x 1.25 = 0.675 of the price.
    assert cost_per_request(Ttl.FIVE_MINUTES, f5=0.5, f60=0.5, rates=RATES) == pytest.approx(0.675)
    # 80% within the hour: 0.8 x 0.1 + 0.2 x 2.0 = 0.48.
    assert cost_per_request(Ttl.ONE_HOUR, f5=0.1, f60=0.8, rates=RATES) == pytest.approx(0.48)
    assert cost_per_request(Ttl.NONE, f5=1.0, f60=1.0, rates=RATES) == 1.0


def test_break_even_points() -> None:
    # 5 minutes pays above f5 = 0.25 / 1.15 = 0.2174; 1 hour alone above 1 / 1.9 = 0.5263.
    assert best_ttl(f5=0.21, f60=0.21) is Ttl.NONE
    assert best_ttl(f5=0.22, f60=0.22) is Ttl.FIVE_MINUTES
    assert best_ttl(f5=0.0, f60=0.52) is Ttl.NONE
    assert best_ttl(f5=0.0, f60=0.53) is Ttl.ONE_HOUR
    # 1 hour beats 5 minutes when 1.9 f60 - 1.15 f5 > 0.75: f5 = 0.3, f60 = 0.6 gives
    # 1.14 - 0.345 = 0.795 > 0.75 (costs 0.905 against 0.905 - 0.0475).
    assert best_ttl(f5=0.3, f60=0.6) is Ttl.ONE_HOUR
    assert best_ttl(f5=0.3, f60=0.55) is Ttl.FIVE_MINUTES


@pytest.mark.parametrize(
    ("n", "five", "hour"), [(1, False, False), (2, True, False), (3, True, True)]
)
def test_a_burst_of_n_requests_pays_from_one_reuse_for_5m_and_two_for_1h(
    n: int, five: bool, hour: bool
) -> None:
    # One write then n - 1 reads, against n uncached requests.
    assert (1.25 + 0.1 * (n - 1) < n) is five
    assert (2.0 + 0.1 * (n - 1) < n) is hour
    share = (n - 1) / n  # the share of the n requests that read the entry
    assert (cost_per_request(Ttl.FIVE_MINUTES, f5=share, f60=share, rates=RATES) < 1) is five
    assert (cost_per_request(Ttl.ONE_HOUR, f5=share, f60=share, rates=RATES) < 1) is hour


@given(st.floats(0, 1), st.floats(0, 1))
def test_the_choice_never_costs_more_than_no_cache(f5: float, f60: float) -> None:
    f60 = max(f5, f60)  # whatever reuses within 5 minutes reuses within the hour
    chosen = best_ttl(f5=f5, f60=f60)
    assert cost_per_request(chosen, f5=f5, f60=f60, rates=RATES) <= 1.0


def test_reuse_shares_count_the_gaps_between_uses() -> None:
    stats = ReuseStats(capacity=10)
    assert stats.shares(1, now=0.0) == (0.0, 0.0)  # never seen: no evidence
    stats.observe(1, now=0.0)
    stats.observe(1, now=60.0)  # 1 minute later
    # Now, 20 minutes on: gaps 60 s and 1,140 s over 3 uses (the first one wrote the entry).
    assert stats.shares(1, now=1200.0) == pytest.approx((1 / 3, 2 / 3))
    for digest in range(2, 12):
        stats.observe(digest, now=1300.0)
    assert len(stats) == 10
    assert stats.last_seen(1) is None  # the least recently used was forgotten
