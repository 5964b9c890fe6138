"""Prefix affinity against two real simulators on loopback, driven by the official OpenAI SDK
through the proxy: every turn of a conversation reaches the simulator that served its first
turn (whose prompt cache then reports the shared prefix as cached tokens), while round robin
alternates; a model's own `balance` overrides the gateway's default strategy."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from levergate.simulator import SimHandle, SimSettings, run_simulator
from tests.e2e.conftest import GatewayFactory
from tests.e2e.test_traffic_faults import sim_requests, upstream

SYSTEM = "You are a careful assistant. " * 200  # ~6 KB: three 2 KB prefix blocks


@pytest.fixture
async def sims() -> AsyncIterator[list[SimHandle]]:
    async with AsyncExitStack() as stack:
        yield [await stack.enter_async_context(run_simulator(SimSettings(port=0)))
               for _ in range(2)]  # fmt: skip


async def conversation(client: openai.AsyncOpenAI, model: str, turns: int) -> list[int]:
    """The cached prompt tokens each turn's answer reported."""
    messages: list[ChatCompletionMessageParam] = [{"role": "system", "content": SYSTEM}]
    cached = []
    for turn in range(turns):
        messages.append({"role": "user", "content": f"Question {turn}: " + "why? " * 100})
        answer = await client.chat.completions.create(model=model, messages=messages, max_tokens=8)
        assert answer.usage is not None
        details = answer.usage.prompt_tokens_details
        cached.append(details.cached_tokens or 0 if details else 0)
        messages.append({"role": "assistant", "content": answer.choices[0].message.content or ""})
    return cached


async def test_a_conversation_stays_on_one_replica_and_hits_its_prompt_cache(
    sims: list[SimHandle], gateway_for: GatewayFactory
) -> None:
    upstreams = [upstream(f"r{i}", s) for i, s in enumerate(sims)]
    targets = [{"upstream": u["name"]} for u in upstreams]
    models = [{"name": "sticky", "endpoints": targets, "balance": "affinity"},
              {"name": "spread", "endpoints": targets}]  # fmt: skip
    traffic = {"seed": 1, "balance": {"strategy": "round_robin"}}
    async with (
        gateway_for(upstreams=upstreams, models=models, traffic=traffic) as url,
        openai.AsyncOpenAI(base_url=url, api_key="unused", max_retries=0) as client,
    ):
        cached = await conversation(client, "sticky", turns=6)
        sticky = sorted(sim_requests(s) for s in sims)
        await conversation(client, "spread", turns=6)
        spread = [sim_requests(s) for s in sims]
    assert sticky == [0, 6]  # every turn on the replica that served the first
    assert all(c > 0 for c in cached[1:])  # and each later turn found its prefix cached there
    assert sorted(b - a for a, b in zip(sorted(sticky), sorted(spread), strict=True)) == [3, 3]
