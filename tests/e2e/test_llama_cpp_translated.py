"""Translated requests against a server levergate did not write: the official anthropic and
openai SDKs -> levergate (Anthropic Messages and the Responses API translated to chat) ->
`llama_cpp.server` with the bundled SmolLM2.

llama_cpp.server answers `"content": null` beside tool calls, and any content array, with a
500, so each flow here ended in a 502 after levergate's attempts: the anthropic SDK's tool
round trip (and langchain-anthropic's follow-up, same shape), the Responses API's
`function_call_output` turn (the Agents SDK's one-tool run: its items and typed parts are
reproduced as it sends them), and the anthropic SDK's cached system prompt. It also sends no
usage in a stream, so the streams below report levergate's own counts, flagged.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anthropic
import openai
import pytest

from tests.e2e.conftest import GatewayFactory
from tests.e2e.llama_rig import LlamaServer

WEATHER: Any = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
QUESTION = "What is the weather in Paris?"
USE: Any = {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "Paris"}}
RESULT: Any = {"type": "tool_result", "tool_use_id": "toolu_01", "content": "15 degrees, sunny",
               "is_error": False}  # fmt: skip
FIRST_BLOCK: Any = {"type": "text", "text": "Here is a city: Paris."}
LAST_BLOCK: Any = {"type": "text", "text": "Which country is it in?",
                   "cache_control": {"type": "ephemeral"}}  # fmt: skip


@pytest.fixture
async def gateway(llama: LlamaServer, gateway_at: GatewayFactory) -> AsyncIterator[str]:
    # No cache: every call reaches llama_cpp.server; one attempt: a refusal is not retried.
    async with gateway_at(
        llama.base_url, cache={"enabled": False}, traffic={"retry": {"max_attempts": 1}}
    ) as url:
        yield url


@pytest.fixture
async def claude(gateway: str) -> AsyncIterator[anthropic.AsyncAnthropic]:
    root = gateway.removesuffix("/v1")
    async with anthropic.AsyncAnthropic(base_url=root, api_key="unused", max_retries=0) as c:
        yield c


@pytest.fixture
async def sdk(gateway: str) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(base_url=gateway, api_key="unused", max_retries=0) as c:
        yield c


async def test_the_anthropic_sdk_tool_round_trip(
    claude: anthropic.AsyncAnthropic,
    llama: LlamaServer,
) -> None:
    before = llama.failed_calls()
    first = await claude.messages.create(
        model="smollm2",
        max_tokens=8,
        tools=[WEATHER],
        messages=[{"role": "user", "content": QUESTION}],
    )
    assert first.content
    # The follow-up every tool loop sends (SmolLM2 seldom calls the tool itself): the
    # assistant's tool_use turn without text, then its result; langchain-anthropic writes the
    # result with `is_error: false`.
    follow_up = await claude.messages.create(
        model="smollm2",
        max_tokens=8,
        tools=[WEATHER],
        messages=[
            {"role": "user", "content": QUESTION},
            {"role": "assistant", "content": [USE]},
            {"role": "user", "content": [RESULT]},
        ],
    )
    assert follow_up.content[0].type == "text"
    assert follow_up.content[0].text
    assert follow_up.usage.input_tokens > 0
    assert llama.failed_calls() == before


async def test_the_anthropic_sdks_cached_system_prompt_and_text_blocks(
    claude: anthropic.AsyncAnthropic,
    llama: LlamaServer,
) -> None:
    before = llama.failed_calls()
    message = await claude.messages.create(
        model="smollm2",
        max_tokens=8,
        system=[
            {"type": "text", "text": "You answer briefly.", "cache_control": {"type": "ephemeral"}}
        ],
        messages=[{"role": "user", "content": [FIRST_BLOCK, LAST_BLOCK]}],
    )
    assert message.content[0].type == "text"
    assert message.content[0].text
    assert llama.failed_calls() == before


async def test_a_responses_function_call_output_turn(
    sdk: openai.AsyncOpenAI,
    llama: LlamaServer,
) -> None:
    """The Agents SDK's second turn of a one-tool run, as it sends it: instructions, an empty
    `include`, a strict function tool, its user item, the model's `function_call` item dumped
    with its id and status, and the tool's output; then a turn of typed `input_text` parts."""
    before = llama.failed_calls()
    tool: Any = {"type": "function", "name": "get_weather", "description": "The weather.",
                 "parameters": {**WEATHER["input_schema"], "additionalProperties": False},
                 "strict": True}  # fmt: skip
    call: Any = {"arguments": '{"city":"Paris"}', "call_id": "call_01", "name": "get_weather",
                 "type": "function_call", "id": "fc_01", "status": "completed"}  # fmt: skip
    response = await sdk.responses.create(
        model="smollm2",
        instructions="You answer briefly.",
        include=[],
        tools=[tool],
        max_output_tokens=16,
        input=[
            {"content": QUESTION, "role": "user"},
            call,
            {"call_id": "call_01", "output": "15 degrees, sunny", "type": "function_call_output"},
        ],
    )
    assert response.output_text
    typed = await sdk.responses.create(
        model="smollm2",
        max_output_tokens=16,
        input=[{"role": "user", "content": [{"type": "input_text", "text": QUESTION}]}],
    )
    assert typed.output_text
    assert llama.failed_calls() == before


async def test_streams_report_levergates_own_counts_when_the_server_sends_none(
    claude: anthropic.AsyncAnthropic, sdk: openai.AsyncOpenAI
) -> None:
    question: Any = [{"role": "user", "content": QUESTION}]
    whole = await claude.messages.create(model="smollm2", max_tokens=6, messages=question)
    async with claude.messages.stream(model="smollm2", max_tokens=6, messages=question) as stream:
        events = [event async for event in stream]
        final = await stream.get_final_message()
    assert final.usage.input_tokens > 0
    assert final.usage.output_tokens > 0
    delta = next(e for e in events if e.type == "message_delta")
    # Counted by levergate, and said so (the bundled model's tokenizer is not tiktoken's).
    assert (delta.usage.model_extra or {}).get("levergate_source") == "estimated"
    assert "levergate_source" not in (whole.usage.model_extra or {})  # reported by the server

    streamed = await sdk.responses.create(
        model="smollm2", input=QUESTION, max_output_tokens=16, stream=True
    )
    # Completed, or incomplete at the cap: the terminal event carries the usage either way.
    last = [event async for event in streamed][-1]
    assert last.type in ("response.completed", "response.incomplete")
    done = last.response.usage
    assert done is not None
    assert done.input_tokens > 0
    assert done.output_tokens > 0
    assert (done.model_extra or {}).get("levergate_source") == "estimated"

    asked = await sdk.chat.completions.create(
        model="smollm2",
        messages=question,
        max_tokens=6,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [chunk async for chunk in asked]
    usage = chunks[-1].usage
    assert usage is not None
    assert usage.prompt_tokens > 0
    assert usage.completion_tokens > 0
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert (usage.model_extra or {}).get("levergate_source") == "estimated"
    # A client that did not ask gets no usage chunk, counted or not.
    plain = await sdk.chat.completions.create(
        model="smollm2", messages=question, max_tokens=6, stream=True
    )
    assert all([chunk.choices async for chunk in plain])
