"""The simulator's Anthropic routes against a client we did not write: the official `anthropic`
SDK parses its messages, streams, token counts, errors and headers into its own typed objects
(a shape the SDK does not know would fail its parsing or land in the wrong exception class)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime

import anthropic
import httpx
import pytest

from levergate.simulator import SimHandle, SimSettings, run_simulator

TOOLS: list[anthropic.types.ToolParam] = [
    {
        "name": "get_weather",
        "description": "Current weather of a city",
        "input_schema": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}},
        },
    }
]


@pytest.fixture
async def sim() -> AsyncIterator[SimHandle]:
    async with run_simulator(SimSettings(port=0)) as handle:
        yield handle


@pytest.fixture
async def client(sim: SimHandle) -> AsyncIterator[anthropic.AsyncAnthropic]:
    async with anthropic.AsyncAnthropic(
        base_url=sim.root_url, api_key="sk-ant-sdk", max_retries=0
    ) as sdk:
        yield sdk


async def test_create_and_stream(client: anthropic.AsyncAnthropic) -> None:
    message = await client.messages.create(
        model="claude-sim", max_tokens=64, messages=[{"role": "user", "content": "Hello"}]
    )
    assert message.stop_reason == "end_turn"
    assert message.content[0].type == "text"
    assert message.usage.output_tokens == len(message.content[0].text.split())
    async with client.messages.stream(
        model="claude-sim", max_tokens=5, messages=[{"role": "user", "content": "Hello"}]
    ) as stream:
        text = "".join([piece async for piece in stream.text_stream])
        final = await stream.get_final_message()
    assert final.stop_reason == "max_tokens"
    assert len(text.split()) == 5
    assert final.content[0].type == "text"
    assert final.content[0].text == text


async def test_tools_whole_and_streamed(client: anthropic.AsyncAnthropic) -> None:
    ask: list[anthropic.types.MessageParam] = [
        {"role": "user", "content": "Call get_weather for Lyon."}
    ]
    message = await client.messages.create(
        model="claude-sim", max_tokens=64, tools=TOOLS, messages=ask
    )
    assert message.stop_reason == "tool_use"
    assert [block.type for block in message.content] == ["text", "tool_use"]
    call = message.content[1]
    assert call.type == "tool_use"
    assert call.name == "get_weather"
    assert isinstance(call.input, dict)
    assert call.input["unit"] == "celsius"
    async with client.messages.stream(
        model="claude-sim", max_tokens=64, tools=TOOLS, messages=ask
    ) as stream:
        final = await stream.get_final_message()
    # The SDK accumulated the streamed input_json_delta fragments into the same input.
    assert final.content[1].type == "tool_use"
    assert final.content[1].input == call.input
    answered = await client.messages.create(
        model="claude-sim",
        max_tokens=64,
        tools=TOOLS,
        messages=[
            *ask,
            {"role": "assistant", "content": message.content},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "9 C"}],
            },
        ],
    )
    assert answered.stop_reason == "end_turn"
    forced = await client.messages.create(
        model="claude-sim",
        max_tokens=64,
        tools=TOOLS,
        tool_choice={"type": "tool", "name": "get_weather"},
        messages=[{"role": "user", "content": "anything"}],
    )
    assert forced.stop_reason == "tool_use"
    none = await client.messages.create(
        model="claude-sim",
        max_tokens=64,
        tools=TOOLS,
        tool_choice={"type": "none"},
        messages=ask,
    )
    assert none.stop_reason == "end_turn"


async def test_count_tokens_and_prompt_caching(client: anthropic.AsyncAnthropic) -> None:
    counted = await client.messages.count_tokens(
        model="claude-sim", messages=[{"role": "user", "content": "Hello there"}]
    )
    assert counted.input_tokens > 0
    rules = "Answer as a pirate would, with nautical words. " * 120
    system: list[anthropic.types.TextBlockParam] = [
        {"type": "text", "text": rules, "cache_control": {"type": "ephemeral"}}
    ]
    first = await client.messages.create(
        model="claude-sim", max_tokens=4, system=system, messages=[{"role": "user", "content": "A"}]
    )
    second = await client.messages.create(
        model="claude-sim", max_tokens=4, system=system, messages=[{"role": "user", "content": "B"}]
    )
    written = first.usage.cache_creation_input_tokens
    assert written is not None
    assert written >= 1024
    assert first.usage.cache_creation is not None
    assert first.usage.cache_creation.ephemeral_5m_input_tokens == written
    assert second.usage.cache_read_input_tokens == written
    assert second.usage.cache_creation_input_tokens == 0
    # input_tokens excludes both cache buckets.
    assert first.usage.input_tokens == second.usage.input_tokens
    total = await client.messages.count_tokens(
        model="claude-sim", system=system, messages=[{"role": "user", "content": "A"}]
    )
    assert total.input_tokens == written + first.usage.input_tokens


async def test_errors_land_in_the_sdk_classes(
    client: anthropic.AsyncAnthropic, sim: SimHandle
) -> None:
    hello: list[anthropic.types.MessageParam] = [{"role": "user", "content": "Hello"}]
    cases: list[tuple[str, type[anthropic.APIStatusError], str]] = [
        ("529", anthropic.OverloadedError, "overloaded_error"),
        ("503", anthropic.OverloadedError, "overloaded_error"),
        ("500", anthropic.InternalServerError, "api_error"),
        ("429", anthropic.RateLimitError, "rate_limit_error"),
    ]
    for fault, kind, error_type in cases:
        with pytest.raises(kind) as caught:
            await client.messages.create(
                model="claude-sim",
                max_tokens=8,
                messages=hello,
                extra_headers={"x-sim-fault": fault},
            )
        assert isinstance(caught.value.body, dict)
        assert caught.value.body["error"]["type"] == error_type
        assert caught.value.request_id is not None
    with pytest.raises(anthropic.BadRequestError):
        await client.messages.create(model="claude-sim", max_tokens=0, messages=hello)
    async with httpx.AsyncClient() as raw:
        refused = await raw.post(
            f"{sim.root_url}/v1/messages",
            json={"model": "claude-sim", "max_tokens": 8, "messages": hello},
            headers={"anthropic-version": "2023-06-01"},
        )
    assert refused.status_code == 401
    assert refused.json()["error"]["type"] == "authentication_error"


async def test_rate_limits_speak_anthropic_headers(
    client: anthropic.AsyncAnthropic, sim: SimHandle
) -> None:
    sim.configure({"limits": {"rpm": 2, "tpm": 100_000}})
    hello: list[anthropic.types.MessageParam] = [{"role": "user", "content": "Hello"}]
    raw = await client.messages.with_raw_response.create(
        model="claude-sim", max_tokens=8, messages=hello
    )
    headers = raw.headers
    assert headers["anthropic-ratelimit-requests-limit"] == "2"
    assert headers["anthropic-ratelimit-requests-remaining"] == "1"
    assert headers["anthropic-ratelimit-tokens-limit"] == "100000"
    reset = datetime.fromisoformat(headers["anthropic-ratelimit-requests-reset"])
    assert reset.tzinfo is not None
    await client.messages.create(model="claude-sim", max_tokens=8, messages=hello)
    with pytest.raises(anthropic.RateLimitError) as caught:
        await client.messages.create(model="claude-sim", max_tokens=8, messages=hello)
    refused = caught.value.response.headers
    assert int(refused["retry-after"]) >= 1
    assert refused["anthropic-ratelimit-requests-remaining"] == "0"
    assert "x-ratelimit-limit-requests" not in refused
