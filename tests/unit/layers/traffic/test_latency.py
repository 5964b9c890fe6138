"""Latency-outlier ejection (`ejection.latency_factor`) on a manual clock: an endpoint much
slower than its peers is ejected and readmitted once it recovers; uniform slowness — steady,
or starting after a quiet spell — and one long generation at low traffic eject nothing."""

from __future__ import annotations

import random

from levergate.policies.ejection import State
from levergate.testing import FakeUpstream, ManualClock, sample_value
from tests.unit.layers.traffic.fakes import Pool, call, ok

FACTOR = 3.0


def pool_of(*seconds: float, min_requests: float = 5.0) -> tuple[Pool, list[FakeUpstream]]:
    endpoints = [FakeUpstream(name=f"e{i}", seconds=s, default=ok) for i, s in enumerate(seconds)]
    pool = Pool(
        endpoints,
        strategy="weighted",
        latency_factor=FACTOR,
        latency_min_requests=min_requests,
    )
    return pool, endpoints


async def serve(pool: Pool, requests: int, *, every: float) -> None:
    assert isinstance(pool.clock, ManualClock)
    for _ in range(requests):
        pool.clock.advance(every)
        await pool.balance(call())


def ejected(pool: Pool) -> list[str]:
    now = pool.clock.now()
    return [s.name for s in pool.states if s.health.state(now) is not State.HEALTHY]


def ever_ejected(pool: Pool) -> list[str]:
    return [s.name for s in pool.states if sample_value(pool.metrics.ejections, s.name)]


async def test_an_endpoint_much_slower_than_its_peers_is_ejected() -> None:
    pool, (_, _, slow) = pool_of(1.0, 1.2, 5.0)
    await serve(pool, 60, every=0.1)
    assert ejected(pool) == ["e2"]
    assert sample_value(pool.metrics.ejections, "e2") == 1
    # Nothing goes to it while it is out (the ejection lasts 10 s).
    served = len(slow.calls)
    await serve(pool, 50, every=0.1)
    assert len(slow.calls) == served


async def test_it_is_readmitted_after_its_ejection_once_it_is_fast_again() -> None:
    pool, (_, _, slow) = pool_of(1.0, 1.0, 5.0)
    await serve(pool, 60, every=0.1)
    assert ejected(pool) == ["e2"]
    slow.seconds = 1.1
    assert isinstance(pool.clock, ManualClock)
    pool.clock.advance(10)
    await serve(pool, 200, every=0.1)
    assert ejected(pool) == []
    assert sample_value(pool.metrics.ejections, "e2") == 1
    assert len(slow.calls) > 50  # serving its share again


async def test_one_that_stays_slow_is_ejected_again_for_longer() -> None:
    pool, _ = pool_of(1.0, 1.0, 5.0)
    await serve(pool, 60, every=0.1)
    first = pool.states[2].health.ejected_until - pool.clock.now()
    assert isinstance(pool.clock, ManualClock)
    pool.clock.advance(first)
    await serve(pool, 100, every=0.1)
    assert sample_value(pool.metrics.ejections, "e2") == 2
    assert pool.states[2].health.ejected_until - pool.clock.now() > first


async def test_uniform_slowness_ejects_nothing() -> None:
    pool, _ = pool_of(8.0, 8.0, 8.0)
    await serve(pool, 300, every=0.1)
    assert ever_ejected(pool) == []


async def test_noisy_but_equal_endpoints_are_never_ejected() -> None:
    pool, endpoints = pool_of(1.0, 1.0, 1.0)
    noise = random.Random(7)
    for _ in range(1000):
        for endpoint in endpoints:  # heavy-tailed, from one distribution for all
            endpoint.seconds = noise.lognormvariate(0.0, 0.8)
        await serve(pool, 1, every=0.1)
    assert ever_ejected(pool) == []


async def test_a_slowdown_of_every_endpoint_after_a_quiet_spell_ejects_nothing() -> None:
    # The first endpoint to answer after the pause looks 10x slower than its peers' stale
    # averages; only its peers' next answers show the slowdown is everywhere.
    pool, endpoints = pool_of(1.0, 1.0, 1.0)
    await serve(pool, 60, every=0.1)
    assert isinstance(pool.clock, ManualClock)
    pool.clock.advance(120)
    for endpoint in endpoints:
        endpoint.seconds = 10.0
    await serve(pool, 100, every=0.1)
    assert ever_ejected(pool) == []


async def test_one_long_generation_at_low_traffic_ejects_nothing() -> None:
    pool, endpoints = pool_of(1.0, 1.0, 1.0)
    await serve(pool, 30, every=3.0)
    endpoints[2].seconds = 30.0  # one request asked for a long answer...
    while not endpoints[2].calls or endpoints[2].calls[-1].ctx.trace.upstream_seconds < 30:
        await serve(pool, 1, every=3.0)
    endpoints[2].seconds = 1.0
    await serve(pool, 30, every=3.0)
    assert ever_ejected(pool) == []  # ...which says nothing about the endpoint


async def test_a_lone_outlier_candidate_needs_two_peers_to_compare_with() -> None:
    pool, _ = pool_of(1.0, 5.0)
    await serve(pool, 200, every=0.1)
    assert ever_ejected(pool) == []
