"""Balance and outlier ejection, driven by a manual clock: spreading by weight and load,
ejection after consecutive failures with growing ejection time, half-open probes, cooldowns
after 429s, quota headroom, and a stream that keeps its endpoint's books open until it closes."""

from __future__ import annotations

import contextlib
import random
from collections import Counter

import hypothesis
import pytest
from hypothesis import strategies as st

from levergate.core.quota import Quota
from levergate.core.reply import Completed, Stream
from levergate.errors import LevergateError, UpstreamRejected, UpstreamUnavailable
from levergate.layers.traffic.retry import Retry
from levergate.policies.backoff import FullJitter
from levergate.policies.balancing import STRATEGIES
from levergate.policies.budget import RetryBudget
from levergate.policies.ejection import State
from levergate.policies.ewma import Ewma
from levergate.testing import FakeUpstream, ManualClock, sample_value
from tests.unit.layers.cache.helpers import drain
from tests.unit.layers.traffic.fakes import (
    AutoClock,
    Pool,
    call,
    ok,
    server_error,
    stream_of,
    throttled,
)


def named(*names: str) -> list[FakeUpstream]:
    return [FakeUpstream(name=n, default=ok) for n in names]


def measured(average: Ewma, value: float, *, now: float = 0.0) -> None:
    """Enough samples at `now` for the balancer to trust the average."""
    for _ in range(3):
        average.observe(value, now=now)


async def test_weighted_choice_follows_the_weights() -> None:
    endpoints = named("a", "b")
    pool = Pool(endpoints, strategy="weighted", weights=[3, 1])
    for _ in range(400):
        await pool.balance(call())
    share = len(endpoints[0].calls) / 400
    assert 0.68 < share < 0.82


async def test_least_outstanding_prefers_the_idle_endpoint() -> None:
    endpoints = [FakeUpstream(name="a", default=stream_of("x")), FakeUpstream(name="b", default=ok)]
    pool = Pool(endpoints, strategy="least_outstanding")
    busy = await pool.balance(call(stream=True))  # lands somewhere; keep it open
    loaded = pool.states[0] if pool.states[0].outstanding else pool.states[1]
    for _ in range(5):
        chosen = pool.balance.choose(call(), pool.clock.now())
        assert chosen.node.state is not loaded
    await drain(busy)
    assert loaded.outstanding == 0


async def test_p2c_prefers_the_endpoint_predicted_to_finish_first() -> None:
    pool = Pool(named("fast", "slow"))
    fast, slow = pool.states
    measured(fast.speed, 100.0)
    measured(slow.speed, 10.0)
    picks = Counter(pool.balance.choose(call(), 0.0).node.state.name for _ in range(50))
    assert picks == {"fast": 50}


async def test_a_failing_endpoint_is_ejected_then_readmitted_by_a_probe() -> None:
    a, b = FakeUpstream(name="a", default=server_error("a")), FakeUpstream(name="b", default=ok)
    pool = Pool([a, b], strategy="weighted")
    state_a = pool.states[0]
    while state_a.health.state(pool.clock.now()) is not State.EJECTED:
        with contextlib.suppress(LevergateError):
            await pool.balance(call())
    assert len(a.calls) == 3
    # Ejected: nothing goes to "a" while its ejection lasts.
    for _ in range(20):
        await pool.balance(call())
    assert len(a.calls) == 3
    # After the ejection time, one probe; it fails, so the next ejection is twice as long.
    assert isinstance(pool.clock, ManualClock)
    pool.clock.advance(10)
    while len(a.calls) == 3:
        with contextlib.suppress(LevergateError):
            await pool.balance(call())
    assert state_a.health.state(pool.clock.now()) is State.EJECTED
    assert state_a.health.ejected_until - pool.clock.now() == pytest.approx(20)
    # It recovers: the next probe succeeds and it serves again.
    a.default = ok()
    pool.clock.advance(20)
    while len(a.calls) == 4:
        await pool.balance(call())
    assert state_a.health.state(pool.clock.now()) is State.HEALTHY
    assert sample_value(pool.metrics.ejections, "a") == 2
    assert sample_value(pool.metrics.ejected, "a") == 0


async def test_the_last_endpoints_are_never_all_ejected() -> None:
    endpoints = [FakeUpstream(name=n, default=server_error(n)) for n in ("a", "b")]
    pool = Pool(endpoints, max_share=0.5)
    for _ in range(30):
        with pytest.raises(LevergateError):
            await pool.balance(call())
    now = pool.clock.now()
    ejected = [s for s in pool.states if s.health.state(now) is State.EJECTED]
    assert len(ejected) == 1


async def test_a_lone_ejected_endpoint_still_serves() -> None:
    only = FakeUpstream(name="a", script=[server_error("a")] * 3, default=ok)
    pool = Pool([only])
    for _ in range(3):
        with pytest.raises(LevergateError):
            await pool.balance(call())
    assert pool.states[0].health.state(pool.clock.now()) is State.EJECTED
    assert isinstance(await pool.balance(call()), Completed)


async def test_an_endpoint_known_from_one_slow_sample_is_tried_again() -> None:
    """A readmitted endpoint's one probe (or a cold connection) must not starve it while its
    peers keep winning every comparison: until its average rests on enough recent samples it
    is predicted optimistically, and once measured it competes on its measured speed."""
    pool = Pool(named("a", "b", "back"))
    a, b, back = pool.states
    measured(a.speed, 100.0)
    measured(b.speed, 100.0)
    back.speed.observe(50.0, now=0)  # one slow sample
    picks = Counter(pool.balance.choose(call(), 0.0).node.state.name for _ in range(60))
    assert picks["back"] > 20
    measured(back.speed, 50.0)
    picks = Counter(pool.balance.choose(call(), 0.0).node.state.name for _ in range(60))
    assert picks["back"] == 0


async def test_a_429_cools_its_key_down_and_the_retry_goes_to_another_at_once() -> None:
    a = FakeUpstream(name="a", script=[throttled(retry_after=30.0)], default=ok)
    b = FakeUpstream(name="b", default=ok)
    pool = Pool([a, b])
    measured(pool.states[0].speed, 1000.0)  # "a" is the first choice...
    measured(pool.states[1].speed, 100.0)  # ...but "b" beats a 30-second cooldown
    with pytest.raises(UpstreamRejected) as caught:
        await pool.balance(call())
    assert caught.value.retry_after == 0.0  # "b" is free right now
    assert pool.states[0].cooldown_until == pytest.approx(30.0)
    assert pool.balance.choose(call(), pool.clock.now()).node.state.name == "b"


async def test_retry_over_balance_lands_on_the_other_endpoint() -> None:
    a = FakeUpstream(name="a", default=server_error("a"))
    b = FakeUpstream(name="b", default=ok)
    pool = Pool([a, b], strategy="weighted", weights=[1000, 1], clock=AutoClock())
    retry = Retry(
        pool.balance,
        backoff=FullJitter(base=0.01, cap=0.01),
        budget=RetryBudget(),
        max_attempts=3,
        max_floor_seconds=30,
        clock=pool.clock,
        rng=random.Random(3),
        metrics=pool.metrics,
    )
    for _ in range(2):
        assert isinstance(await retry(call()), Completed)
    # Each request failed once on "a" and was retried on "b", despite a's 1000x weight.
    assert len(a.calls) == 2
    assert len(b.calls) == 2


async def test_an_exhausted_quota_cools_the_key_until_its_reset() -> None:
    pool = Pool(named("a", "b"))
    state = pool.states[0]
    headers = {
        "x-ratelimit-limit-requests": "100",
        "x-ratelimit-remaining-requests": "0",
        "x-ratelimit-reset-requests": "6s",
        "x-ratelimit-limit-tokens": "1000",
        "x-ratelimit-remaining-tokens": "500",
    }
    pool.balance._read_quota(state, Quota.from_headers(headers), now=0.0)
    assert state.headroom == 0.0
    assert state.cooldown_until == pytest.approx(6.0)


async def test_a_stream_keeps_its_endpoint_busy_until_it_closes() -> None:
    pool = Pool([FakeUpstream(name="a", default=stream_of("x", "y"))])
    reply = await pool.balance(call(stream=True, max_tokens=40))
    state = pool.states[0]
    assert state.outstanding == 1
    assert state.queued_tokens == 40
    assert state.prefilling == 1  # no first token yet
    await drain(reply)
    assert state.outstanding == 0
    assert state.queued_tokens == 0
    assert state.prefilling == 0


async def test_requests_stop_prefilling_at_their_first_token_answer_or_failure() -> None:
    pool = Pool([FakeUpstream(name="a", default=stream_of("x", "y"))])
    state = pool.states[0]
    reply = await pool.balance(call(stream=True))
    assert isinstance(reply, Stream)
    events = aiter(reply)
    await anext(events)
    assert (state.prefilling, state.outstanding) == (0, 1)  # decoding now
    await reply.aclose()
    whole = Pool([FakeUpstream(name="b", default=Completed(data={"choices": []}))])
    await whole.balance(call())
    failing = Pool([FakeUpstream(name="c", default=UpstreamUnavailable("down"))])
    with pytest.raises(UpstreamUnavailable):
        await failing.balance(call())
    assert [p.states[0].prefilling for p in (pool, whole, failing)] == [0, 0, 0]


@hypothesis.settings(max_examples=150, deadline=None)
@hypothesis.given(
    ejected=st.lists(st.booleans(), min_size=1, max_size=6),
    strategy=st.sampled_from(sorted(STRATEGIES)),
    cooling=st.lists(st.booleans(), min_size=6, max_size=6),
)
def test_no_strategy_picks_an_ejected_endpoint_while_a_healthy_one_exists(
    ejected: list[bool], strategy: str, cooling: list[bool]
) -> None:
    pool = Pool(named(*(f"e{i}" for i in range(len(ejected)))), strategy=strategy)
    for state, out, cool in zip(pool.states, ejected, cooling, strict=False):
        if out:
            state.health.eject(0.0)
        state.cooldown_until = 5.0 if cool else 0.0
    for _ in range(20):
        chosen = pool.balance.choose(call(), 1.0).node.state
        if not all(ejected):
            assert chosen.health.available(1.0)
