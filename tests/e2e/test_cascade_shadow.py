"""Cascade shadow samples end to end: the official OpenAI SDK through the proxy to the simulator,
every accepted answer shadowed by the strongest step, and `/metrics` read back over HTTP.

The simulator's words are a function of the prompt and the model name, so `small` (sim-small)
and `large` (sim-large) always answer an easy prompt differently (every sample disagrees), while
`twin` is another alias of sim-large itself (every sample agrees). HARD prompts fail the cheap
model's logprob check and escalate."""

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

HARD_SIM = {"marker": "HARD", "strong_models": ["sim-large"]}


@pytest.fixture
async def sims() -> AsyncIterator[tuple[SimHandle, SimHandle]]:
    """The provider, and one that never answers (a strong model stuck)."""
    async with simulators(hard=HARD_SIM) as both:
        yield both


def _settings(good: SimHandle, hung: SimHandle, shadow: dict[str, Any]) -> dict[str, Any]:
    logprobs = [{"kind": "mean_logprob", "threshold": -0.5}]
    return gateway_settings(good, hung, cascade={
        "shadow": shadow,
        "cascades": [{"name": "qa", "steps": ["small", "large"], "checks": logprobs},
                     {"name": "twins", "steps": ["twin", "large"], "checks": logprobs},
                     {"name": "hung", "steps": ["small", "stuck"], "checks": logprobs}],
    })  # fmt: skip


def _shadow(metrics: Metrics, cascade: str, result: str) -> float:
    return value(metrics, "levergate_cascade_shadow_total", cascade=cascade, result=result) or 0.0


async def test_shadows_measure_agreement_retention_and_their_spend(
    sims: tuple[SimHandle, SimHandle],
) -> None:
    good, hung = sims
    easy = [ask(f"What is {i} plus {i}?") for i in range(2)]
    async with proxy(_settings(good, hung, {"rate": 1.0})) as (sdk, metrics_url):
        for messages in easy:
            raw = await sdk.chat.completions.with_raw_response.create(model="qa", messages=messages)
            assert raw.headers["x-levergate-cascade"] == "accepted"
        for i in range(2):  # escalated: the strong model answered, nothing to shadow
            raw = await sdk.chat.completions.with_raw_response.create(
                model="qa", messages=ask(f"HARD question {i}")
            )
            assert raw.headers["x-levergate-cascade"] == "escalated"
        for i in range(3):
            await sdk.chat.completions.create(model="twins", messages=ask(f"Name {i} colours."))
        metrics = await until(metrics_url, lambda m: (
            _shadow(m, "qa", "disagree") + _shadow(m, "twins", "agree") == 5
        ))  # fmt: skip
        # What one shadow call of each easy prompt cost: the strong model's usage for it.
        direct = [await sdk.chat.completions.create(model="large", messages=m) for m in easy]
    assert [_shadow(metrics, "qa", r) for r in ("agree", "disagree", "failed", "dropped")] == [
        0, 2, 0, 0,
    ]  # fmt: skip
    assert _shadow(metrics, "twins", "agree") == 3
    assert _shadow(metrics, "twins", "disagree") == 0
    # qa: 2 of 4 accepted, every sample disagreed: 1 - 0.5 x 1. twins: all agreed.
    retention = "levergate_cascade_quality_retention"
    assert value(metrics, retention, cascade="qa") == pytest.approx(0.5)
    assert value(metrics, retention, cascade="twins") == 1.0
    assert value(metrics, retention, cascade="hung") is None  # nothing measured: absent
    usages = [d.usage for d in direct]
    expected = sum((u.prompt_tokens * 10.0 + u.completion_tokens * 30.0) / 1e6
                   for u in usages if u is not None)  # fmt: skip
    assert expected > 0
    shadow_spend = value(metrics, "levergate_spend_usd_total", model="large", tenant="acme",
                         feature="faq", kind="shadow")  # fmt: skip
    # twin's samples went to `large` too; twin itself is unpriced, so only `large` is paid.
    assert shadow_spend is not None
    assert shadow_spend > expected
    # Three twin prompts cost what three calls to large cost; together, all five shadows.
    twins = [await large_usd(good, f"Name {i} colours.") for i in range(3)]
    assert shadow_spend == pytest.approx(expected + sum(twins))
    # Upstream calls: qa's 2 accepted + 2 x 2 escalated, twins' 3, one per shadow (5), and the
    # 2 + 3 direct calls made here to price them.
    assert good.stats()["requests_by_endpoint"]["/v1/chat/completions"] == 6 + 3 + 5 + 2 + 3


async def test_a_full_queue_drops_and_the_gateway_closes_with_shadows_pending(
    sims: tuple[SimHandle, SimHandle],
) -> None:
    good, hung = sims
    shadow = {"rate": 1.0, "queue": 1, "concurrency": 1}
    before = asyncio.all_tasks()
    async with proxy(_settings(good, hung, shadow)) as (sdk, metrics_url):
        for i in range(4):
            raw = await sdk.chat.completions.with_raw_response.create(
                model="hung", messages=ask(f"What is {i} plus one?")
            )
            assert raw.headers["x-levergate-cascade"] == "accepted"  # the client never waits
        # One sample can be with the (stuck) worker and one in the queue: the rest dropped.
        metrics = await until(metrics_url, lambda m: _shadow(m, "hung", "dropped") >= 2)
        assert _shadow(metrics, "hung", "dropped") <= 3
        assert sum(_shadow(metrics, "hung", r) for r in ("agree", "disagree", "failed")) == 0
    # Closed with a shadow call in flight and one queued: every task the gateway made is gone.
    assert asyncio.all_tasks() <= before | {asyncio.current_task()}
