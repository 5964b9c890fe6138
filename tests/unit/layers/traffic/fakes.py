"""Test vocabulary for the traffic levers: calls, scripted outcomes (ok, errors, streams) for
`levergate.testing.FakeUpstream`, a balanced pool of such endpoints, and a loop-settling helper."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Sequence
from typing import Any

from levergate.core.call import Call, Context
from levergate.core.controls import Controls, Principal, Priority
from levergate.core.reply import Completed, Event, EventSource, Reply, Stream
from levergate.errors import LevergateError, Overloaded, UpstreamRejected, UpstreamUnavailable
from levergate.layers.traffic.balance import Balance, Member
from levergate.layers.traffic.endpoints import EjectionGroup, EndpointState, Node
from levergate.layers.traffic.metrics import TrafficMetrics
from levergate.layers.traffic.outlier import OutlierEjection
from levergate.layers.traffic.waiting import WaitingRoom
from levergate.policies.balancing import strategy_named
from levergate.policies.ejection import Ejection, EjectionPolicy
from levergate.stores.limits import MemoryLimitStore
from levergate.testing import FakeUpstream, ManualClock


def call(
    *,
    model: str = "m",
    priority: Priority = Priority.DEFAULT,
    deadline: float | None = None,
    tenant: str = "default",
    stream: bool = False,
    **body: Any,
) -> Call:
    return Call(
        kind="chat",
        body={"model": model, "messages": [{"role": "user", "content": "hi"}], **body}
        | ({"stream": True} if stream else {}),
        ctx=Context(
            "r1",
            principal=Principal(tenant=tenant),
            controls=Controls(priority=priority, deadline=deadline),
        ),
    )


def ok(text: str = "fine", *, completion_tokens: int = 5, prompt_tokens: int = 10) -> Completed:
    return Completed(
        data={
            "choices": [{"message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens},
        }
    )


def server_error(name: str = "up") -> UpstreamUnavailable:
    return UpstreamUnavailable("boom", upstream=name, upstream_status=503)


def throttled(retry_after: float | None = None) -> UpstreamRejected:
    return UpstreamRejected(
        "slow down", upstream="up", upstream_status=429, retry_after=retry_after
    )


def stream_of(*chunks: str, fail_after: int | None = None) -> Callable[[], Reply]:
    """A stream factory: `fail_after=n` breaks the stream after n events (0: before any)."""

    async def events() -> EventSource:
        for i, chunk in enumerate(chunks):
            if fail_after is not None and i >= fail_after:
                raise UpstreamUnavailable("cut", upstream="up", code="stream_interrupted")
            yield Event.of({"choices": [{"delta": {"content": chunk}}]})
        if fail_after is not None and fail_after >= len(chunks):
            raise UpstreamUnavailable("cut", upstream="up", code="stream_interrupted")

    return lambda: Stream(events())


async def settle(rounds: int = 20) -> None:
    """Let every runnable task run until it blocks again."""
    for _ in range(rounds):
        await asyncio.sleep(0)


class AutoClock:
    """A clock whose sleeps return at once, moving time forward; every sleep is recorded."""

    def __init__(self, start: float = 0.0) -> None:
        self.t = start
        self.slept: list[float] = []

    def now(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.t += max(0.0, seconds)
        await asyncio.sleep(0)


def shed(why: str, after: float) -> LevergateError:
    return Overloaded(why, retry_after=after)


class Pool:
    """N scripted endpoints behind OutlierEjection, balanced by one Balance."""

    def __init__(
        self,
        endpoints: Sequence[FakeUpstream],
        *,
        strategy: str = "p2c",
        weights: list[float] | None = None,
        max_share: float = 0.5,
        clock: ManualClock | AutoClock | None = None,
        latency_factor: float | None = None,
        latency_min_requests: float = 5.0,
    ) -> None:
        self.clock = clock or ManualClock()
        self.metrics = TrafficMetrics()
        self.group = EjectionGroup(max_share=max_share, metrics=self.metrics)
        store = MemoryLimitStore(clock=self.clock)
        self.states: list[EndpointState] = []
        members = []
        policy = EjectionPolicy(consecutive_failures=3, base_seconds=10, max_seconds=100)
        for i, endpoint in enumerate(endpoints):
            room = WaitingRoom(store=store, clock=self.clock, shed_error=shed)
            state = EndpointState(name=endpoint.name, room=room, health=Ejection(policy=policy))
            self.group.add(state)
            self.states.append(state)
            service = OutlierEjection(
                endpoint, state=state, group=self.group, clock=self.clock, metrics=self.metrics
            )
            weight = weights[i] if weights else 1.0
            members.append(Member(Node(state, service), weight))
        self.balance = Balance(
            members=members,
            strategy=strategy_named(strategy),
            group=self.group,
            clock=self.clock,
            rng=random.Random(1),
            latency_factor=latency_factor,
            latency_min_requests=latency_min_requests,
        )
