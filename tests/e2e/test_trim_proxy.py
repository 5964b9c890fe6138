"""Trim through the proxy: the official OpenAI SDK as the client, the simulator as the provider.
The simulator reports the prompt it received in `usage.prompt_tokens` (its own rendering of the
messages), so the tests see exactly which messages went upstream."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, cast

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from levergate.simulator import SimHandle
from levergate.simulator.tokens import chat_prompt, count_tokens
from tests.e2e.conftest import GatewayFactory

WORDS = " ".join(f"word{i}" for i in range(60))


def conversation(turns: int) -> list[ChatCompletionMessageParam]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."}]
    for i in range(turns):
        messages.append({"role": "user", "content": f"question {i}: {WORDS}"})
        messages.append({"role": "assistant", "content": f"answer {i}: {WORDS}"})
    messages.append({"role": "user", "content": "and finally?"})
    return cast("list[ChatCompletionMessageParam]", messages)


def sim_tokens(messages: list[Any]) -> int:
    return count_tokens(chat_prompt({"messages": messages}))


@pytest.fixture
async def client(sim: SimHandle, gateway_for: GatewayFactory) -> AsyncIterator[openai.AsyncOpenAI]:
    trim = {"models": {
        "gpt-4o": {"budget": 700, "default_max_tokens": 5, "max_tokens": 8},
        "strict": {"context_window": 1000, "over_max_tokens": "reject", "max_tokens": 100},
        "summed": {"budget": 900, "summary_model": "mini", "summary_tokens": 16},
    }}  # fmt: skip
    models = [{"name": n, "upstream": "sim"} for n in ("gpt-4o", "strict", "summed", "mini")]
    async with (
        gateway_for(upstreams=[{"name": "sim", "base_url": sim.base_url}], models=models,
                    trim=trim) as url,
        openai.AsyncOpenAI(base_url=url, api_key="sk-e2e", max_retries=0, timeout=30) as sdk,
    ):  # fmt: skip
        yield sdk


async def test_a_conversation_over_the_budget_reaches_the_upstream_trimmed(
    client: openai.AsyncOpenAI, sim: SimHandle
) -> None:
    messages = conversation(12)
    answer = await client.chat.completions.create(model="gpt-4o", messages=messages)
    assert answer.usage is not None
    received = answer.usage.prompt_tokens
    assert received < sim_tokens(messages)
    # What arrived is the system prompt and a run of the newest turns, the question last.
    suffixes = {sim_tokens([messages[0], *messages[k:]]) for k in range(1, len(messages))}
    assert received in suffixes
    assert received < sim_tokens([messages[0], *messages[-7:]])  # older turns were dropped
    # No max_tokens asked: the alias's default (5) was sent.
    assert answer.usage.completion_tokens == 5
    assert answer.choices[0].finish_reason == "length"
    capped = await client.chat.completions.create(
        model="gpt-4o",
        messages=messages[-1:],
        max_tokens=50,
    )
    assert capped.usage is not None
    assert capped.usage.completion_tokens == 8
    # An alias without a rule is sent as it is.
    whole = await client.chat.completions.create(model="mini", messages=messages)
    assert whole.usage is not None
    assert whole.usage.prompt_tokens == sim_tokens(messages)


async def test_a_last_turn_too_long_for_the_window_is_a_400(client: openai.AsyncOpenAI) -> None:
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": WORDS * 30}]
    with pytest.raises(openai.BadRequestError) as caught:
        await client.chat.completions.create(model="strict", messages=messages)
    assert caught.value.code == "context_length_exceeded"
    assert caught.value.param == "messages"
    with pytest.raises(openai.BadRequestError) as over:
        await client.chat.completions.create(
            model="strict", messages=[{"role": "user", "content": "hi"}], max_tokens=5000
        )
    assert over.value.code == "integer_above_max_value"


@pytest.mark.parametrize(
    "extra",
    [{"max_tokens": -1}, {"max_tokens": "many"}, {"max_tokens": 10**12}, {"max_tokens": 1.5},
     {"max_completion_tokens": 0}],
)  # fmt: skip
async def test_absurd_output_budgets_are_400s(client: openai.AsyncOpenAI, extra: Any) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        await client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "hi"}], extra_body=extra
        )
    assert caught.value.status_code == 400


async def test_gigantic_message_counts_are_refused_before_counting(
    client: openai.AsyncOpenAI,
) -> None:
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "x"}] * 5000
    with pytest.raises(openai.BadRequestError) as caught:
        await client.chat.completions.create(model="gpt-4o", messages=messages)
    assert caught.value.code == "array_above_max_length"


async def test_dropped_history_is_summarised_by_a_real_call(
    client: openai.AsyncOpenAI, sim: SimHandle
) -> None:
    before = sim.stats()["requests_total"]
    messages = conversation(12)
    answer = await client.chat.completions.create(model="summed", messages=messages)
    assert sim.stats()["requests_total"] == before + 2  # the summary, then the answer
    assert answer.usage is not None
    # The summary sits after the system prompt: the prompt is no suffix of the conversation.
    suffixes = {sim_tokens([messages[0], *messages[k:]]) for k in range(1, len(messages))}
    assert answer.usage.prompt_tokens not in suffixes
    assert answer.usage.prompt_tokens < sim_tokens(messages)
