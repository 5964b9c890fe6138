"""The Tiers layer: an explicit `service_tier` is sent as it is (or refused when the model has no
price for it), the deadline policy picks flex for time to spare and standard or priority for
tight deadlines, a flex refusal is re-decided within the deadline, and every answer's latency
goes into the book; an attempt that overruns is hedged by a faster tier. A scripted upstream on
a virtual-time loop (every wait exact, none real); no network."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from levergate.catalog import Catalog
from levergate.config import Settings, TiersSettings
from levergate.core.call import Call
from levergate.core.controls import Priority
from levergate.core.reply import Reply
from levergate.errors import BadRequest, UpstreamRejected
from levergate.layers.tiers import TierBook, Tiers, is_refusal
from levergate.policies.tiers import EXPLICIT, IN_TIME, NO_DEADLINE, Tier
from levergate.testing import FakeUpstream, LoopClock, run_virtual
from tests.unit.layers.traffic.fakes import call, ok, throttled

SETTINGS = Settings.load(
    upstreams=[{"name": "o", "base_url": "http://127.0.0.1:9/v1"}],
    models=[{"name": "fast", "upstream": "o", "upstream_model": "gpt-5-mini"},
            {"name": "old", "upstream": "o", "upstream_model": "gpt-4o-mini"},
            {"name": "*", "upstream": "o"}],
)  # fmt: skip


def refusal(status: int = 429) -> UpstreamRejected:
    return UpstreamRejected("Resource unavailable: flex capacity is exhausted.", upstream="o",
                            upstream_status=status, code="resource_unavailable")  # fmt: skip


def virtual(test: Callable[[], Awaitable[None]]) -> Callable[[], None]:
    """The test on a virtual-time loop: cool-downs and hedges wait exactly, and not at all."""

    @functools.wraps(test)
    def run() -> None:
        run_virtual(test())  # type: ignore[arg-type]

    return run


def now() -> float:
    return asyncio.get_running_loop().time()


def tiers(
    inner: Any, *, alias: str = "fast", **changes: Any
) -> tuple[Tiers, TierBook]:  # fmt: skip
    settings = TiersSettings.model_validate({"enabled": True, **changes})
    clock = LoopClock()
    book = TierBook(settings, catalog=Catalog.build(SETTINGS), clock=clock)
    layer = Tiers(inner, settings=settings, alias=alias, book=book, clock=clock, choosing=True)
    return layer, book


def sent_tier(inner: FakeUpstream, n: int = -1) -> object:
    return inner.calls[n].body.get("service_tier")


@virtual
async def test_an_explicit_tier_is_sent_as_asked_and_recorded() -> None:
    inner = FakeUpstream(default=ok())
    layer, _ = tiers(inner)
    c = call(model="fast", service_tier="flex", deadline=1.0)  # a deadline changes nothing
    await layer(c)
    assert sent_tier(inner) == "flex"
    decision = c.ctx.trace.tier_decision
    assert decision is not None
    assert (decision.chosen, decision.reason) == (Tier.FLEX, EXPLICIT)
    assert c.ctx.trace.tier is Tier.FLEX


@virtual
async def test_an_explicit_tier_the_model_has_no_price_for_is_a_400_naming_both() -> None:
    inner = FakeUpstream(default=ok())
    layer, _ = tiers(inner, alias="old")
    with pytest.raises(BadRequest) as caught:
        await layer(call(model="old", service_tier="flex"))
    assert caught.value.param == "service_tier"
    assert "'flex'" in caught.value.message
    assert "'old'" in caught.value.message
    assert inner.calls == []
    await layer(call(model="old", service_tier="default"))  # standard is always priced


@virtual
async def test_behind_the_wildcard_the_name_sent_is_priced() -> None:
    inner = FakeUpstream(default=ok())
    layer, _ = tiers(inner, alias="*")
    await layer(call(model="gpt-5", service_tier="priority"))
    with pytest.raises(BadRequest, match="'gpt-4o-mini'"):
        await layer(call(model="gpt-4o-mini", service_tier="priority"))
    await layer(call(model="my-own-model", service_tier="flex"))  # unpriced: nothing to check


@virtual
async def test_no_deadline_is_standard_and_sends_nothing() -> None:
    inner = FakeUpstream(default=ok())
    layer, _ = tiers(inner)
    c = call(model="fast")
    await layer(c)
    assert "service_tier" not in inner.calls[0].body
    decision = c.ctx.trace.tier_decision
    assert decision is not None
    assert (decision.chosen, decision.reason) == (Tier.STANDARD, NO_DEADLINE)


@virtual
async def test_time_to_spare_goes_flex_a_tight_deadline_standard() -> None:
    inner = FakeUpstream(default=ok())
    layer, _ = tiers(inner)
    await layer(call(model="fast", deadline=3600.0))
    assert sent_tier(inner) == "flex"
    await layer(call(model="fast", deadline=60.0))
    assert "service_tier" not in inner.calls[-1].body


@virtual
async def test_priority_only_for_an_interactive_request_the_route_allows_it_for() -> None:
    inner = FakeUpstream(default=ok())
    routes = {"fast": {"ceiling": "priority"}}
    layer, _ = tiers(inner, routes=routes)
    await layer(call(model="fast", deadline=3.0, priority=Priority.INTERACTIVE))
    assert sent_tier(inner) == "priority"
    await layer(call(model="fast", deadline=3.0, priority=Priority.DEFAULT))
    assert "service_tier" not in inner.calls[-1].body
    capped, _ = tiers(inner)  # ceiling standard
    await capped(call(model="fast", deadline=3.0, priority=Priority.INTERACTIVE))
    assert "service_tier" not in inner.calls[-1].body


@virtual
async def test_a_flex_refusal_is_re_decided_to_standard_in_time() -> None:
    inner = FakeUpstream(script=[refusal()], default=ok())
    layer, book = tiers(inner, refusal_cooldown_seconds=600)
    c = call(model="fast", deadline=400.0)
    await layer(c)
    assert [sent_tier(inner, 0), inner.calls[1].body.get("service_tier")] == ["flex", None]
    decision = c.ctx.trace.tier_decision
    assert decision is not None
    assert decision.refused == (Tier.FLEX,)
    assert (decision.chosen, decision.reason) == (Tier.STANDARD, IN_TIME)
    # The tier cools down for every request of the model: the next one goes standard at once.
    await layer(call(model="fast", deadline=400.0))
    assert len(inner.calls) == 3
    assert "service_tier" not in inner.calls[2].body
    assert book.option("fast", Tier.FLEX, Catalog.build(SETTINGS).rates("fast"),
                       body={}).refusals > 0  # fmt: skip


@virtual
async def test_with_hours_to_spare_a_refused_flex_waits_and_goes_flex_again() -> None:
    inner = FakeUpstream(script=[refusal(498)], default=ok())
    layer, _ = tiers(inner, refusal_cooldown_seconds=20)
    started = now()
    await layer(call(model="fast", deadline=6 * 3600.0))
    assert [c.body.get("service_tier") for c in inner.calls] == ["flex", "flex"]
    assert 20.0 <= now() - started <= 40.0  # the cool-down, spread by up to as much again


@virtual
async def test_after_max_redecisions_refusals_the_next_tier_up_answers() -> None:
    inner = FakeUpstream(script=[refusal(), refusal()], default=ok())
    layer, _ = tiers(inner, refusal_cooldown_seconds=1, max_redecisions=2)
    c = call(model="fast", deadline=6 * 3600.0)
    await layer(c)
    assert [x.body.get("service_tier") for x in inner.calls] == ["flex", "flex", None]
    decision = c.ctx.trace.tier_decision
    assert decision is not None
    assert decision.refused == (Tier.FLEX, Tier.FLEX)


@virtual
async def test_a_refusal_with_no_time_left_goes_back_to_the_client() -> None:
    sent: list[Call] = []

    async def slow_refusal(c: Call) -> Reply:
        sent.append(c)
        await asyncio.sleep(1000.0)  # the flex attempt used up the time
        raise refusal()

    layer, _ = tiers(slow_refusal)
    with pytest.raises(UpstreamRejected) as caught:
        await layer(call(model="fast", deadline=now() + 900.0))
    assert caught.value.retried  # the client's SDK should not repeat what was decided here
    assert [c.body.get("service_tier") for c in sent] == ["flex", None]  # hedged at the end


@virtual
async def test_a_key_rate_limit_is_no_refusal_and_is_not_re_decided() -> None:
    inner = FakeUpstream(script=[throttled(1.0)], default=ok())
    layer, _ = tiers(inner)
    with pytest.raises(UpstreamRejected):
        await layer(call(model="fast", deadline=3600.0))  # Retry, above, deals with it
    assert len(inner.calls) == 1
    assert not is_refusal(UpstreamRejected("Rate limit reached", upstream_status=429,
                                           code="rate_limit_exceeded"))  # fmt: skip
    assert is_refusal(refusal(498))
    assert is_refusal(refusal(429))


@virtual
async def test_answers_calibrate_the_estimate() -> None:
    inner = FakeUpstream(default=ok())
    layer, book = tiers(inner, min_samples=3)
    before = book.seconds("fast", Tier.FLEX, prompt=10, output=5)
    for _ in range(3):
        await layer(call(model="fast", deadline=3600.0))
    assert book.samples("fast", Tier.FLEX) == 3
    assert book.seconds("fast", Tier.FLEX, prompt=10, output=5) < before  # answered at once


def test_a_flex_attempt_that_overruns_is_hedged_by_standard_in_time() -> None:
    """Virtual time: flex would take 1000 s; at the deadline (400 s) minus standard's estimate
    standard is asked beside it, answers first, and the flex attempt is cancelled."""

    async def scenario() -> tuple[list[object], float, Any, Any]:
        clock = LoopClock()
        sent: list[object] = []

        async def provider(c: Call) -> Reply:
            sent.append(c.body.get("service_tier"))
            if c.body.get("service_tier") == "flex":
                await asyncio.sleep(1000.0)
            return ok()

        settings = TiersSettings(enabled=True)
        book = TierBook(settings, catalog=Catalog.build(SETTINGS), clock=clock)
        layer = Tiers(provider, settings=settings, alias="fast", book=book, clock=clock,
                      choosing=True)  # fmt: skip
        c = call(model="fast", deadline=400.0)
        await layer(c)
        return sent, clock.now(), c.ctx.trace.tier_decision, c.ctx.trace.tier

    sent, finished, decision, tier = run_virtual(scenario())
    assert sent == ["flex", None]
    assert 360.0 < finished < 400.0  # with standard's estimate (~14 s at its prior) to spare
    assert decision is not None
    assert (decision.chosen, decision.hedged) == (Tier.FLEX, Tier.STANDARD)
    assert tier is Tier.STANDARD  # what answered, and what it is priced at


def test_an_overrun_attempt_that_answers_first_still_wins_the_hedge() -> None:
    async def scenario() -> tuple[list[object], Any]:
        clock = LoopClock()
        sent: list[object] = []

        async def provider(c: Call) -> Reply:
            tier = c.body.get("service_tier")
            sent.append(tier)
            await asyncio.sleep(390.0 if tier == "flex" else 50.0)  # standard slower now
            return ok()

        settings = TiersSettings(enabled=True)
        book = TierBook(settings, catalog=Catalog.build(SETTINGS), clock=clock)
        layer = Tiers(provider, settings=settings, alias="fast", book=book, clock=clock,
                      choosing=True)  # fmt: skip
        c = call(model="fast", deadline=400.0)
        await layer(c)
        return sent, c.ctx.trace.tier

    sent, tier = run_virtual(scenario())
    assert sent == ["flex", None]
    assert tier is Tier.FLEX
