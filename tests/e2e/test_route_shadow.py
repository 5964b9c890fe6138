"""Route shadow samples end to end: the official OpenAI SDK through the proxy to the simulator,
a rules route sending `faq` requests to a cheap alias, every such answer shadowed by the route's
default, and `/metrics` read back over HTTP.

The simulator's words are a function of the prompt and the model name, so `small` (sim-small)
and `large` (sim-large) always answer a prompt differently (every sample disagrees), while
`twin` is another alias of sim-large itself (every sample agrees)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from levergate.simulator import SimHandle
from tests.e2e.shadow_rig import (
    Metrics,
    ask,
    gateway_settings,
    large_usd,
    proxy,
    simulators,
    until,
    value,
)

OTHER_FEATURE = {"x-levergate-feature": "chat"}  # not a faq: the route's default answers


@pytest.fixture
async def sims() -> AsyncIterator[tuple[SimHandle, SimHandle]]:
    """The provider, and one that never answers (a default model stuck)."""
    async with simulators() as both:
        yield both


def _settings(good: SimHandle, hung: SimHandle, shadow: dict[str, Any]) -> dict[str, Any]:
    def faq_to(alias: str) -> list[dict[str, Any]]:
        return [{"name": "faq", "to": alias, "when": {"feature": ["faq"]}}]

    return gateway_settings(good, hung, routing={
        "shadow": shadow,
        "routes": [{"name": "auto", "default": "large", "rules": faq_to("small")},
                   {"name": "twins", "default": "large", "rules": faq_to("twin")},
                   {"name": "hung", "default": "stuck", "rules": faq_to("small")}],
    })  # fmt: skip


def _shadow(metrics: Metrics, route: str, result: str) -> float:
    return value(metrics, "levergate_route_shadow_total", route=route, result=result) or 0.0


async def test_route_shadows_measure_agreement_live_retention_and_their_spend(
    sims: tuple[SimHandle, SimHandle],
) -> None:
    good, hung = sims
    faqs = [f"What is {i} plus {i}?" for i in range(2)]
    twins = [f"Name {i} colours." for i in range(3)]
    async with proxy(_settings(good, hung, {"rate": 1.0})) as (sdk, metrics_url):
        for text in faqs:  # to the cheap alias: shadowed by `large`, and they disagree
            reply = await sdk.chat.completions.create(model="auto", messages=ask(text))
            assert reply.model == "sim-small"
        # A streamed answer from the cheap alias: passed through, not sampled, counted.
        stream = await sdk.chat.completions.create(
            model="auto", messages=ask("Stream me an answer."), stream=True
        )
        streamed = [c.choices[0].delta.content async for c in stream if c.choices]
        assert "".join(s for s in streamed if s)
        for i in range(2):  # answered by the default itself: nothing to shadow
            reply = await sdk.chat.completions.create(
                model="auto", messages=ask(f"Hello {i}"), extra_headers=OTHER_FEATURE
            )
            assert reply.model == "sim-large"
        for text in twins:
            await sdk.chat.completions.create(model="twins", messages=ask(text))
        metrics = await until(metrics_url, lambda m: (
            _shadow(m, "auto", "disagree") + _shadow(m, "auto", "streamed")
            + _shadow(m, "twins", "agree") == 6
        ))  # fmt: skip
    results = ("agree", "disagree", "failed", "dropped", "streamed")
    assert [_shadow(metrics, "auto", r) for r in results] == [0, 2, 0, 0, 1]
    assert [_shadow(metrics, "twins", r) for r in results] == [3, 0, 0, 0, 0]
    # auto: 3 of 5 answered by `small`, every compared sample disagreed: 1 - 0.6 x 1.
    retention = "levergate_route_quality_retention"
    assert value(metrics, retention, route="auto") == pytest.approx(0.4)
    assert value(metrics, retention, route="twins") == 1.0
    assert value(metrics, retention, route="hung") is None  # nothing measured: absent
    # Five shadow calls went to `large` (twin itself is unpriced): what five direct calls cost.
    expected = sum([await large_usd(good, text) for text in faqs + twins])
    assert expected > 0
    spent = value(metrics, "levergate_spend_usd_total", model="large", tenant="acme",
                   feature="faq", kind="shadow")  # fmt: skip
    assert spent == pytest.approx(expected)
    # Upstream calls: 2 + 1 + 2 + 3 answers, 5 shadows, and the 5 direct calls made here.
    assert good.stats()["requests_by_endpoint"]["/v1/chat/completions"] == 8 + 5 + 5


async def test_a_full_queue_drops_and_the_gateway_closes_with_shadows_pending(
    sims: tuple[SimHandle, SimHandle],
) -> None:
    good, hung = sims
    shadow = {"rate": 1.0, "queue": 1, "concurrency": 1}
    before = asyncio.all_tasks()
    async with proxy(_settings(good, hung, shadow)) as (sdk, metrics_url):
        for i in range(4):  # the client never waits for the (stuck) default
            reply = await sdk.chat.completions.create(
                model="hung", messages=ask(f"What is {i} plus one?")
            )
            assert reply.model == "sim-small"
        # One sample can be with the stuck worker and one in the queue: the rest dropped.
        metrics = await until(metrics_url, lambda m: _shadow(m, "hung", "dropped") >= 2)
        assert _shadow(metrics, "hung", "dropped") <= 3
        assert sum(_shadow(metrics, "hung", r) for r in ("agree", "disagree", "failed")) == 0
    assert asyncio.all_tasks() <= before | {asyncio.current_task()}
