"""Limits and scheduling, driven by a manual clock: all-or-nothing charges, priority order,
shedding at the deadline, concurrency permits that live as long as the stream, TPM correction
and tenant admission."""

from __future__ import annotations

import asyncio

import pytest

from levergate.config import MaxWaitSettings, RateLimitsSettings
from levergate.core.controls import Priority
from levergate.core.reply import Completed, Event, EventSource, Stream
from levergate.errors import LevergateError, Overloaded, RateLimited
from levergate.layers.traffic.admission import Admission
from levergate.layers.traffic.limits import Limits, LimitScope
from levergate.layers.traffic.metrics import TrafficMetrics
from levergate.layers.traffic.waiting import Slots, WaitingRoom
from levergate.policies.gcra import Rate
from levergate.policies.tiers import Tier
from levergate.stores.limits import Charge, MemoryLimitStore
from levergate.testing import FakeUpstream, ManualClock
from levergate.testing.metrics import sample_value
from tests.unit.layers.cache.helpers import drain
from tests.unit.layers.traffic.fakes import call, ok, settle, stream_of

ONE_PER_SECOND = Rate(limit=1, window=1.0)


def shed(why: str, after: float) -> LevergateError:
    return Overloaded(f"shed: {why}", retry_after=after)


async def test_a_refused_charge_spends_nothing_on_the_others() -> None:
    clock = ManualClock()
    store = MemoryLimitStore(clock=clock)
    roomy = Rate(limit=100, window=1.0)
    assert await store.acquire([Charge("a", 1, ONE_PER_SECOND)]) == 0
    wait = await store.acquire([Charge("b", 1, roomy), Charge("a", 1, ONE_PER_SECOND)])
    assert wait == pytest.approx(1.0)
    # "b" was not charged: a lone request for it still has the full burst of one.
    assert await store.acquire([Charge("b", 1, Rate(limit=100, window=1.0, burst=1))]) == 0


async def test_waiters_are_admitted_by_priority_then_arrival() -> None:
    clock = ManualClock()
    store = MemoryLimitStore(clock=clock)
    room = WaitingRoom(store=store, clock=clock, shed_error=shed)
    charges = [Charge("k:rpm", 1, ONE_PER_SECOND)]
    await room.enter(charges=charges, priority=1, deadline=100)
    order: list[str] = []

    async def wait(name: str, priority: Priority) -> None:
        await room.enter(charges=charges, priority=int(priority), deadline=100)
        order.append(name)

    async with asyncio.TaskGroup() as tasks:
        tasks.create_task(wait("batch-1", Priority.BATCH))
        await settle()
        tasks.create_task(wait("batch-2", Priority.BATCH))
        tasks.create_task(wait("default", Priority.DEFAULT))
        tasks.create_task(wait("interactive", Priority.INTERACTIVE))
        await settle()
        for _ in range(5):
            clock.advance(1.0)
            await settle()
    assert order == ["interactive", "default", "batch-1", "batch-2"]


async def test_a_request_whose_wait_exceeds_its_deadline_is_shed_at_once() -> None:
    clock = ManualClock()
    room = WaitingRoom(store=MemoryLimitStore(clock=clock), clock=clock, shed_error=shed)
    charges = [Charge("k:rpm", 1, Rate(limit=1, window=10.0))]
    await room.enter(charges=charges, priority=1, deadline=100)
    with pytest.raises(Overloaded) as caught:
        await room.enter(charges=charges, priority=1, deadline=5)
    assert caught.value.retry_after == pytest.approx(10.0)
    assert room.queued == 0


async def test_a_waiter_is_shed_when_its_deadline_passes_behind_others() -> None:
    clock = ManualClock()
    room = WaitingRoom(store=MemoryLimitStore(clock=clock), clock=clock, shed_error=shed)
    charges = [Charge("k:rpm", 1, ONE_PER_SECOND)]
    await room.enter(charges=charges, priority=1, deadline=100)
    first = asyncio.create_task(room.enter(charges=charges, priority=1, deadline=100))
    await settle()
    # Predicted: 1s for the current window plus 1s for the one ahead; 1.5s is not enough.
    with pytest.raises(Overloaded):
        await room.enter(charges=charges, priority=1, deadline=1.5)
    clock.advance(1.0)
    await settle()
    await first


async def test_a_full_queue_sheds_its_lowest_priority_waiter() -> None:
    clock = ManualClock()
    room = WaitingRoom(
        store=MemoryLimitStore(clock=clock), clock=clock, shed_error=shed, max_queue=1
    )
    charges = [Charge("k:rpm", 1, ONE_PER_SECOND)]
    await room.enter(charges=charges, priority=1, deadline=100)
    batch = asyncio.create_task(room.enter(charges=charges, priority=2, deadline=100))
    await settle()
    urgent = asyncio.create_task(room.enter(charges=charges, priority=0, deadline=100))
    await settle()
    with pytest.raises(Overloaded):
        await batch
    clock.advance(1.0)
    await settle()
    await urgent


def _limits(inner: FakeUpstream, clock: ManualClock, *, limits: RateLimitsSettings) -> Limits:
    store = MemoryLimitStore(clock=clock)
    cap = limits.max_concurrency
    slots = [Slots(lambda: cap)] if cap else []
    room = WaitingRoom(store=store, clock=clock, slots=slots, shed_error=shed)
    return Limits(
        inner,
        name="up",
        room=room,
        scopes=[LimitScope.of("key:x", limits)],
        store=store,
        clock=clock,
        max_wait=MaxWaitSettings(),
        metrics=TrafficMetrics(),
    )


async def test_a_stream_holds_its_concurrency_permit_until_it_closes() -> None:
    clock = ManualClock()
    inner = FakeUpstream(default=stream_of("a", "b"))
    limits = _limits(inner, clock, limits=RateLimitsSettings(max_concurrency=1))
    one, two = call(stream=True), call(stream=True)
    first = await limits(one)
    second = asyncio.create_task(limits(two))
    await settle()
    assert len(inner.calls) == 1  # the second waits for the first stream's permit
    clock.advance(3.0)
    await drain(first)
    await settle()
    assert len(inner.calls) == 2
    await drain(await second)
    # The wait is on the call's record (the finished-request record's `queued_seconds`).
    assert (one.ctx.trace.queued_seconds, two.ctx.trace.queued_seconds) == (0.0, 3.0)


async def test_tokens_are_reserved_up_front_and_corrected_by_usage() -> None:
    clock = ManualClock()
    inner = FakeUpstream(default=ok(prompt_tokens=10))
    limits = RateLimitsSettings(tpm=1000, window_seconds=60, tpm_charge="reserved")
    layer = _limits(inner, clock, limits=limits)
    scope = LimitScope.of("key:x", limits)
    assert scope.tpm is not None
    interval, burst = scope.tpm.interval, scope.tpm.burst
    # Reserved at admission: the estimated prompt plus the 500-token cap; the provider then
    # reports a 10-token prompt, so the charge becomes 10 + 500 = 510.
    await layer(call(max_tokens=500))
    wait = await layer._store.acquire(scope.charges(1), commit=False)
    assert wait == pytest.approx((510 + 1 - burst) * interval)


async def test_used_tokens_refund_what_was_reserved_but_not_generated() -> None:
    clock = ManualClock()
    inner = FakeUpstream(default=ok(prompt_tokens=10, completion_tokens=5))
    limits = RateLimitsSettings(tpm=1000, window_seconds=60, tpm_charge="used")
    layer = _limits(inner, clock, limits=limits)
    scope = LimitScope.of("key:x", limits)
    assert scope.tpm is not None
    await layer(call(max_tokens=900))
    # Only 15 tokens were really spent; the other 890 reserved ones are given back. A charge
    # larger than the burst waits for the bucket to be idle: 15 tokens' worth of time.
    assert scope.tpm.burst < 100
    wait = await layer._store.acquire(scope.charges(100), commit=False)
    assert wait == pytest.approx(15 * scope.tpm.interval)


async def test_a_streams_usage_corrects_the_charge_whatever_its_json_spacing() -> None:
    async def spaced() -> EventSource:  # as Python servers write it: `"usage": {`
        yield Event(b'{"choices": [{"index": 0, "delta": {"content": "hi"}}]}')
        yield Event(b'{"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 5}}')

    clock = ManualClock()
    inner = FakeUpstream(default=lambda: Stream(spaced()))
    limits = RateLimitsSettings(tpm=1000, window_seconds=60, tpm_charge="used")
    layer = _limits(inner, clock, limits=limits)
    scope = LimitScope.of("key:x", limits)
    assert scope.tpm is not None
    await drain(await layer(call(stream=True, max_tokens=900)))
    wait = await layer._store.acquire(scope.charges(100), commit=False)
    assert wait == pytest.approx(15 * scope.tpm.interval)


def _admission(inner: FakeUpstream, clock: ManualClock, *, rpm: int) -> Admission:
    return Admission(
        inner,
        tenants={"acme": RateLimitsSettings(window_seconds=60, burst=0.5, rpm=rpm)},
        default=None,
        store=MemoryLimitStore(clock=clock),
        clock=clock,
        max_wait=MaxWaitSettings(interactive=1, default=1, batch=1),
        max_queue=100,
        metrics=TrafficMetrics(),
    )


async def test_a_tenant_over_its_rate_gets_429_with_retry_after() -> None:
    clock = ManualClock()
    inner = FakeUpstream(default=ok)
    admission = _admission(inner, clock, rpm=4)  # a burst of 2, then one per 20 seconds
    await admission(call(tenant="acme"))
    await admission(call(tenant="acme"))
    with pytest.raises(RateLimited) as caught:
        await admission(call(tenant="acme"))
    assert caught.value.retry_after is not None
    assert caught.value.retry_after > 1
    # Other tenants are not limited, and the refused request never went upstream.
    await admission(call(tenant="other"))
    assert len(inner.calls) == 3


async def test_the_tenants_queue_depth_is_a_gauge() -> None:
    """`levergate_tenant_queued`: the requests waiting in every tenant's room (the dashboard's
    queue depth), read when the registry is collected."""
    clock = ManualClock()
    inner = FakeUpstream(default=stream_of("a", "b"))
    metrics = TrafficMetrics()
    admission = Admission(
        inner, tenants={"acme": RateLimitsSettings(max_concurrency=1)}, default=None,
        store=MemoryLimitStore(clock=clock), clock=clock,
        max_wait=MaxWaitSettings(interactive=60, default=60, batch=60), max_queue=100,
        metrics=metrics,
    )  # fmt: skip
    first = await admission(call(tenant="acme", stream=True))
    waiting = [asyncio.create_task(admission(call(tenant="acme", stream=True))) for _ in range(2)]
    await settle()
    assert sample_value(metrics.tenant_queued) == 2
    await drain(first)
    await settle()
    assert sample_value(metrics.tenant_queued) == 1
    for task in waiting:
        await drain(await task)
        await settle()
    assert sample_value(metrics.tenant_queued) == 0


async def test_an_expired_deadline_is_refused_before_any_work() -> None:
    clock = ManualClock(start=10.0)
    inner = FakeUpstream(default=ok)
    admission = _admission(inner, clock, rpm=100)
    with pytest.raises(RateLimited):
        await admission(call(tenant="acme", deadline=5.0))
    assert inner.calls == []
    reply = await admission(call(tenant="acme", deadline=20.0))
    assert isinstance(reply, Completed)


async def test_background_traffic_leaves_the_reserved_slots_to_the_rest() -> None:
    """A key of 10 slots with a 20% reserve: batch and flex fill 8, the 9th waits, and an
    interactive request still gets in at once."""
    clock = ManualClock()
    slots = Slots(lambda: 10, reserve=0.2)
    room = WaitingRoom(store=MemoryLimitStore(clock=clock), clock=clock, slots=[slots],
                       shed_error=shed)  # fmt: skip
    for _ in range(8):
        await room.enter(charges=[], priority=int(Priority.BATCH), deadline=100, background=True)
    waiting = asyncio.ensure_future(
        room.enter(charges=[], priority=int(Priority.BATCH), deadline=100, background=True)
    )
    await settle()
    assert not waiting.done()
    assert room.queued == 1
    await room.enter(charges=[], priority=int(Priority.INTERACTIVE), deadline=100)
    assert slots.in_use == 9
    room.release()
    room.release()  # back to 7 in use: the waiting background request fits under its cap
    await settle()
    assert waiting.done()
    assert slots.in_use == 8
    assert Slots(lambda: 1, reserve=0.5).free(background=True)  # one slot is never withheld


def test_background_charges_carry_the_reduced_limits() -> None:
    limits = RateLimitsSettings(rpm=100, tpm=10_000, interactive_reserve=0.25)
    scope = LimitScope.of("key:k", limits)
    assert [c.key for c in scope.charges(50)] == ["key:k:rpm", "key:k:tpm"]
    background = scope.charges(50, background=True)
    assert [c.key for c in background] == ["key:k:rpm", "key:k:tpm", "key:k:rpm:bg",
                                           "key:k:tpm:bg"]  # fmt: skip
    assert (background[2].rate.limit, background[3].rate.limit) == (75, 7500)
    none = LimitScope.of("key:k", limits.model_copy(update={"interactive_reserve": 0.0}))
    assert len(none.charges(50, background=True)) == 2


async def test_a_flex_request_counts_as_background_whatever_its_class() -> None:
    clock = ManualClock()
    limits = RateLimitsSettings(rpm=4, window_seconds=60, burst=1.0, interactive_reserve=0.5)
    scope = LimitScope.of("key:k", limits)
    room = WaitingRoom(store=MemoryLimitStore(clock=clock), clock=clock, shed_error=shed)
    limited = Limits(FakeUpstream(default=ok()), name="k", room=room, scopes=[scope],
                     store=MemoryLimitStore(clock=clock), clock=clock,
                     max_wait=MaxWaitSettings(default=1.0), metrics=TrafficMetrics())  # fmt: skip
    flex = call(priority=Priority.DEFAULT)
    flex.ctx.trace.tier = Tier.FLEX
    await limited(flex)
    flex2 = call(priority=Priority.DEFAULT)
    flex2.ctx.trace.tier = Tier.FLEX
    await limited(flex2)
    third = call(priority=Priority.DEFAULT)
    third.ctx.trace.tier = Tier.FLEX
    with pytest.raises(Overloaded):  # half of 4 per minute is background's
        await limited(third)
    await limited(call(priority=Priority.DEFAULT))  # the reserve is there for the rest
    await limited(call(priority=Priority.DEFAULT))
