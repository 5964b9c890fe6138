"""Provider-style rate limits: the sliding window's exactness, OpenAI's headers and durations."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from levergate.simulator.limits import (
    RateLimiter,
    SlidingWindow,
    format_duration,
    retry_headers,
)
from levergate.simulator.settings import LimitSettings


@settings(max_examples=300)
@given(
    limit=st.integers(1, 50),
    window=st.sampled_from([1.0, 10.0, 60.0]),
    steps=st.lists(st.tuples(st.floats(0, 5), st.integers(1, 20)), max_size=200),
)
def test_never_admits_more_than_the_limit_in_any_window(
    limit: int, window: float, steps: list[tuple[float, int]]
) -> None:
    sliding = SlidingWindow(limit=limit, window=window)
    now = 0.0
    admitted: list[tuple[float, int]] = []
    for gap, cost in steps:
        now += gap
        if sliding.wait_for(cost, now) == 0:
            sliding.commit(cost, now)
            admitted.append((now, cost))
    # The heaviest window ends at an admission: check every one.
    for end, _ in admitted:
        inside = sum(cost for at, cost in admitted if end - window < at <= end)
        assert inside <= limit


@given(
    limit=st.integers(1, 50),
    steps=st.lists(st.tuples(st.floats(0, 3), st.integers(1, 10)), max_size=100),
)
def test_waiting_the_advertised_time_is_enough(limit: int, steps: list[tuple[float, int]]) -> None:
    sliding = SlidingWindow(limit=limit, window=10.0)
    now = 0.0
    for gap, cost in steps:
        now += gap
        wait = sliding.wait_for(cost, now)
        if math.isinf(wait):
            assert cost > limit
            continue
        if wait > 0:
            now += wait
            assert sliding.wait_for(cost, now) == 0
        sliding.commit(cost, now)


def test_capacity_returns_as_old_admissions_leave_the_window() -> None:
    sliding = SlidingWindow(limit=3, window=60.0)
    for at in (0.0, 10.0, 20.0):
        sliding.commit(1, at)
    assert sliding.remaining(30.0) == 0
    assert sliding.wait_for(1, 30.0) == pytest.approx(30.0)
    assert sliding.wait_for(2, 30.0) == pytest.approx(40.0)
    assert sliding.remaining(60.0) == 1
    assert sliding.reset_after(60.0) == pytest.approx(20.0)
    assert sliding.remaining(80.0) == 3
    assert sliding.reset_after(80.0) == 0


def test_close_admissions_merge_without_weakening_the_limit() -> None:
    sliding = SlidingWindow(limit=1000, window=60.0, quantum=0.01)
    for i in range(500):
        sliding.commit(1, i * 0.0001)
    assert len(sliding._times) <= 6
    assert sliding.remaining(59.9) == 500
    assert sliding.remaining(60.06) == 1000


def test_a_request_larger_than_the_limit_can_never_fit() -> None:
    assert math.isinf(SlidingWindow(limit=10).wait_for(11, 0.0))


def test_limiter_commits_to_both_windows_or_neither() -> None:
    limiter = RateLimiter(settings=LimitSettings(rpm=10, tpm=100))
    assert limiter.admit(key="k", tokens=90, now=0.0).admitted
    refused = limiter.admit(key="k", tokens=20, now=1.0)
    assert not refused.admitted
    assert refused.limited_by == "tokens"
    assert refused.retry_after == pytest.approx(59.0)
    headers = dict(refused.headers)
    # The refused request took no request slot.
    assert headers["x-ratelimit-remaining-requests"] == "9"
    assert headers["x-ratelimit-remaining-tokens"] == "10"
    assert headers["x-ratelimit-limit-tokens"] == "100"
    assert headers["x-ratelimit-reset-tokens"] == "59s"


def test_limits_are_per_key() -> None:
    limiter = RateLimiter(settings=LimitSettings(rpm=1))
    assert limiter.admit(key="a", tokens=1, now=0.0).admitted
    assert not limiter.admit(key="a", tokens=1, now=0.0).admitted
    assert limiter.admit(key="b", tokens=1, now=0.0).admitted
    assert limiter.admit(key="", tokens=1, now=0.0).admitted


def test_exhausted_headers_report_nothing_remaining() -> None:
    limiter = RateLimiter(settings=LimitSettings(rpm=5))
    headers = dict(limiter.exhausted_headers(key="k", now=0.0))
    assert headers == {
        "x-ratelimit-limit-requests": "5",
        "x-ratelimit-remaining-requests": "0",
        "x-ratelimit-reset-requests": "0s",
    }


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (0.0004, "1ms"),
        (0.12, "120ms"),
        (1, "1s"),
        (8.64, "8.64s"),
        (59.9984, "59.999s"),
        (59.9994, "1m0s"),
        (60, "1m0s"),
        (360, "6m0s"),
        (61.5, "1m1.5s"),
        (3723, "1h2m3s"),
    ],
)
def test_durations_are_formatted_like_openai(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_retry_after_rounds_up_and_keeps_milliseconds() -> None:
    assert dict(retry_headers(0.2)) == {"retry-after": "1", "retry-after-ms": "200"}
    assert dict(retry_headers(20.0001)) == {"retry-after": "21", "retry-after-ms": "20001"}
