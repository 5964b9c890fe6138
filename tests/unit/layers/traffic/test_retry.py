"""Retry: what is retried, how long it waits, and the budget that bounds it — with a manual
clock recording every sleep instead of sleeping."""

from __future__ import annotations

import random

import pytest

from levergate.core.reply import Completed
from levergate.errors import BadRequest, UpstreamRejected, UpstreamTimeout, UpstreamUnavailable
from levergate.layers.traffic.deadline import Deadline
from levergate.layers.traffic.metrics import TrafficMetrics
from levergate.layers.traffic.retry import Retry
from levergate.policies.backoff import FullJitter
from levergate.policies.budget import RetryBudget
from levergate.testing import FakeUpstream, sample_value
from tests.unit.layers.cache.helpers import drain
from tests.unit.layers.traffic.fakes import AutoClock, call, ok, server_error, stream_of, throttled


def _retry(
    inner: FakeUpstream,
    clock: AutoClock,
    *,
    budget: RetryBudget | None = None,
    max_attempts: int = 4,
    metrics: TrafficMetrics | None = None,
) -> Retry:
    return Retry(
        inner,
        backoff=FullJitter(base=0.1, cap=2.0),
        budget=budget or RetryBudget(ratio=0.2, min_per_second=10),
        max_attempts=max_attempts,
        max_floor_seconds=30,
        clock=clock,
        rng=random.Random(7),
        metrics=metrics or TrafficMetrics(),
    )


async def test_a_5xx_is_retried_until_an_answer_comes() -> None:
    clock = AutoClock()
    inner = FakeUpstream(script=[server_error(), server_error()], default=ok)
    reply = await _retry(inner, clock)(call())
    assert isinstance(reply, Completed)
    assert len(inner.calls) == 3
    assert len(clock.slept) == 2


async def test_the_callers_own_mistakes_are_never_retried() -> None:
    clock = AutoClock()
    bad = UpstreamRejected("bad", upstream="up", upstream_status=400)
    inner = FakeUpstream(script=[bad], default=ok)
    with pytest.raises(UpstreamRejected):
        await _retry(inner, clock)(call())
    inner = FakeUpstream(script=[BadRequest("no")], default=ok)
    with pytest.raises(BadRequest):
        await _retry(inner, clock)(call())
    assert clock.slept == []


async def test_the_wait_is_never_shorter_than_retry_after() -> None:
    clock = AutoClock()
    inner = FakeUpstream(script=[throttled(retry_after=3.0)], default=ok)
    await _retry(inner, clock)(call())
    assert clock.slept[0] >= 3.0


async def test_attempts_stop_at_the_hard_cap() -> None:
    clock = AutoClock()
    inner = FakeUpstream(default=server_error())
    with pytest.raises(UpstreamUnavailable):
        await _retry(inner, clock, max_attempts=3)(call())
    assert len(inner.calls) == 3


async def test_retries_stay_within_the_budget_across_requests() -> None:
    clock = AutoClock()
    inner = FakeUpstream(default=server_error())
    metrics = TrafficMetrics()
    retry = _retry(inner, clock, budget=RetryBudget(ratio=0.2, min_per_second=0.0), metrics=metrics)
    requests = 50
    for _ in range(requests):
        with pytest.raises(UpstreamUnavailable):
            await retry(call())
    retries = len(inner.calls) - requests
    assert retries <= 0.2 * requests
    assert retries > 0
    denied = sample_value(metrics.retries_denied, "budget")
    assert denied > 0


async def test_a_stream_failing_before_its_first_event_is_retried() -> None:
    clock = AutoClock()
    inner = FakeUpstream(script=[stream_of("a", "b", fail_after=0)], default=stream_of("a", "b"))
    reply = await _retry(inner, clock)(call(stream=True))
    chunks = await drain(reply)
    assert [c["choices"][0]["delta"]["content"] for c in chunks] == ["a", "b"]
    assert len(inner.calls) == 2


async def test_a_stream_cut_after_its_first_event_is_not_retried() -> None:
    clock = AutoClock()
    inner = FakeUpstream(script=[stream_of("a", "b", fail_after=1)], default=stream_of("a", "b"))
    reply = await _retry(inner, clock)(call(stream=True))
    with pytest.raises(UpstreamUnavailable):
        await drain(reply)
    assert len(inner.calls) == 1


async def test_no_retry_is_scheduled_past_the_deadline() -> None:
    clock = AutoClock()
    inner = FakeUpstream(script=[throttled(retry_after=5.0)], default=ok)
    with pytest.raises(UpstreamRejected):
        await _retry(inner, clock)(call(deadline=2.0))
    assert clock.slept == []


async def test_an_expired_deadline_is_not_sent() -> None:
    clock = AutoClock()
    clock.t = 10.0
    inner = FakeUpstream(default=ok)
    with pytest.raises(UpstreamTimeout) as caught:
        await Deadline(inner, clock=clock)(call(deadline=5.0))
    assert caught.value.code == "deadline_exceeded"
    assert inner.calls == []
