"""Active health checks on a manual clock with scripted probes: ejection after the unhealthy
threshold without any request, held out past the ejection time while probes fail, readmitted
by passing probes, left to the passive half-open probe when only completions fail, and the
ejection cap honoured."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest

from levergate.config import HealthCheckSettings
from levergate.layers.traffic.endpoints import EjectionGroup, EndpointState
from levergate.layers.traffic.health_checks import HealthChecks
from levergate.layers.traffic.metrics import TrafficMetrics
from levergate.layers.traffic.waiting import WaitingRoom
from levergate.policies.ejection import Ejection, EjectionPolicy, State
from levergate.stores.limits import MemoryLimitStore
from levergate.testing import ManualClock, sample_value
from tests.unit.layers.traffic.fakes import settle, shed

INTERVAL = 5.0
DOWN = "unreachable: connection refused"


@dataclass
class FakeProbe:
    """A probe answering `failure` (None: healthy) until told otherwise; counts its calls."""

    failure: str | None = None
    calls: int = 0
    closed: bool = field(default=False)

    async def __call__(self) -> str | None:
        self.calls += 1
        return self.failure

    async def aclose(self) -> None:
        self.closed = True


class Fleet:
    """Endpoint states in one ejection group, each with a scripted probe, checked on a clock."""

    def __init__(
        self, *names: str, max_share: float = 0.5, unhealthy: int = 2, healthy: int = 2
    ) -> None:
        self.clock = ManualClock()
        self.metrics = TrafficMetrics()
        self.group = EjectionGroup(max_share=max_share, metrics=self.metrics)
        store = MemoryLimitStore(clock=self.clock)
        policy = EjectionPolicy(consecutive_failures=3, base_seconds=10, max_seconds=100)
        self.states: dict[str, EndpointState] = {}
        self.probes: dict[str, FakeProbe] = {}
        for name in names:
            room = WaitingRoom(store=store, clock=self.clock, shed_error=shed)
            state = EndpointState(name=name, room=room, health=Ejection(policy=policy))
            self.group.add(state)
            self.states[name] = state
            self.probes[name] = FakeProbe()
        self.checks = HealthChecks(
            targets=[(self.states[n], self.probes[n]) for n in names],
            settings=HealthCheckSettings(
                enabled=True,
                interval_seconds=INTERVAL,
                jitter=0.0,
                unhealthy_threshold=unhealthy,
                healthy_threshold=healthy,
            ),
            group=self.group,
            clock=self.clock,
            rng=random.Random(1),
            metrics=self.metrics,
        )

    def state(self, name: str) -> State:
        return self.states[name].health.state(self.clock.now())

    async def interval(self, count: int = 1) -> None:
        """Let `count` more rounds of probes run."""
        for _ in range(count):
            self.clock.advance(INTERVAL)
            await settle()


@pytest.fixture
async def fleet() -> AsyncIterator[Fleet]:
    fleet = Fleet("a", "b", "c")
    job = asyncio.create_task(fleet.checks.run())
    await settle()  # the first round runs at once
    yield fleet
    job.cancel()
    await asyncio.gather(job, return_exceptions=True)


async def test_a_dead_endpoint_is_ejected_by_probes_alone(fleet: Fleet) -> None:
    fleet.probes["c"].failure = DOWN
    await fleet.interval()
    assert fleet.state("c") is State.HEALTHY  # one failed probe is not a verdict
    await fleet.interval()
    assert fleet.state("c") is State.EJECTED
    assert sample_value(fleet.metrics.ejections, "c") == 1
    assert sample_value(fleet.metrics.health_checks, "c", "fail") == 2
    assert fleet.state("a") is fleet.state("b") is State.HEALTHY


async def test_it_stays_out_while_probes_fail_then_passing_probes_readmit_it(
    fleet: Fleet,
) -> None:
    fleet.probes["c"].failure = DOWN
    await fleet.interval(2)
    health = fleet.states["c"].health
    # Far beyond the 10 s ejection: no half-open window while the probes still fail.
    for _ in range(10):
        await fleet.interval()
        assert not health.available(fleet.clock.now())
    assert health.ejections == 1  # held, not ejected again and again
    fleet.probes["c"].failure = None
    await fleet.interval()
    assert fleet.state("c") is State.EJECTED  # one pass is not a verdict either
    await fleet.interval()
    assert fleet.state("c") is State.HEALTHY
    assert sample_value(fleet.metrics.ejected, "c") == 0


async def test_flapping_probes_below_the_threshold_eject_nothing(fleet: Fleet) -> None:
    for round_ in range(12):
        fleet.probes["c"].failure = DOWN if round_ % 2 else None
        await fleet.interval()
        assert fleet.state("c") is State.HEALTHY
    assert sample_value(fleet.metrics.ejections, "c") == 0


async def test_passing_probes_leave_a_passive_ejection_to_its_half_open_probe(
    fleet: Fleet,
) -> None:
    state = fleet.states["c"]
    for _ in range(3):  # completions fail while the model listing still answers
        fleet.group.failure(state, fleet.clock.now())
    assert fleet.state("c") is State.EJECTED
    await fleet.interval()
    assert fleet.state("c") is State.EJECTED  # a listing is no proof it serves
    await fleet.interval()
    assert fleet.state("c") is State.HALF_OPEN  # after its 10 s: a real request decides


async def test_a_passive_ejection_the_probes_confirm_is_readmitted_by_them(
    fleet: Fleet,
) -> None:
    state = fleet.states["c"]
    for _ in range(3):
        fleet.group.failure(state, fleet.clock.now())
    fleet.probes["c"].failure = DOWN
    await fleet.interval(4)
    assert fleet.state("c") is State.EJECTED  # held past its own 10 s
    fleet.probes["c"].failure = None
    await fleet.interval(2)
    assert fleet.state("c") is State.HEALTHY


async def test_probes_never_eject_beyond_the_cap() -> None:
    fleet = Fleet("a", "b", max_share=0.5)
    for probe in fleet.probes.values():
        probe.failure = DOWN
    for _ in range(3):
        for name, state in fleet.states.items():
            fleet.checks.judge(state, fleet.probes[name].failure)
    ejected = [n for n in fleet.states if fleet.state(n) is State.EJECTED]
    assert len(ejected) == 1  # the other keeps serving: fail open


async def test_thresholds_come_from_the_settings() -> None:
    fleet = Fleet("a", "b", "c", unhealthy=4, healthy=1)
    state = fleet.states["c"]
    for expected in (State.HEALTHY,) * 3 + (State.EJECTED,):
        fleet.checks.judge(state, DOWN)
        assert fleet.state("c") is expected
    fleet.checks.judge(state, None)
    assert fleet.state("c") is State.HEALTHY


async def test_the_job_ends_when_cancelled() -> None:
    fleet = Fleet("a", "b")
    job = asyncio.create_task(fleet.checks.run())
    await settle()
    assert [p.calls for p in fleet.probes.values()] == [1, 1]
    job.cancel()
    await asyncio.gather(job, return_exceptions=True)
    assert job.cancelled()
    fleet.clock.advance(INTERVAL)
    await settle()
    assert [p.calls for p in fleet.probes.values()] == [1, 1]
