"""levergate in front of a server we did not write: `llama_cpp.server` (FastAPI + sse-starlette,
Python JSON, validation errors answered 500, no stream usage) running the bundled SmolLM2, with
the official OpenAI SDK as the client. Kept cheap: one server per module, a small context, one
thread, a few tokens per answer."""

from __future__ import annotations

import time

import anthropic
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from levergate.config import RetrySettings
from tests.e2e.conftest import GatewayFactory
from tests.e2e.llama_rig import LlamaServer

FRANCE: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "What is the capital of France?"}
]


async def test_the_sdk_through_levergate_streamed_and_not(
    llama: LlamaServer, gateway_at: GatewayFactory
) -> None:
    async with (
        # No cache: every call below goes to llama_cpp.server, none is replayed.
        gateway_at(llama.base_url, cache={"enabled": False}) as url,
        openai.AsyncOpenAI(base_url=url, api_key="sk-client") as sdk,
    ):
        raw = await sdk.chat.completions.with_raw_response.create(
            model="smollm2", messages=FRANCE, max_tokens=6, temperature=0
        )
        reply = raw.parse()
        assert reply.choices[0].message.content
        assert reply.usage is not None
        assert reply.usage.completion_tokens > 0  # output tokens reported
        assert raw.headers["x-upstream-request-id"]  # the provider's id, allow-listed
        stream = await sdk.chat.completions.create(
            model="smollm2", messages=FRANCE, max_tokens=6, temperature=0, stream=True
        )
        # The everyday loop: every chunk a client that did not ask for usage gets has a choice.
        text = "".join([chunk.choices[0].delta.content or "" async for chunk in stream])
        assert text == reply.choices[0].message.content
        asked = await sdk.chat.completions.create(
            model="smollm2", messages=FRANCE, max_tokens=6, temperature=0, stream=True,
            stream_options={"include_usage": True},
        )  # fmt: skip
        chunks = [chunk async for chunk in asked]
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text


async def test_an_invalid_request_makes_a_bounded_number_of_upstream_calls(
    llama: LlamaServer, gateway_at: GatewayFactory
) -> None:
    attempts = RetrySettings().max_attempts
    fast = {"traffic": {"retry": {"base_seconds": 0.01, "cap_seconds": 0.02}}}
    # An unknown role: the SDK's types refuse it, llama.cpp's server answers it with a 500.
    robot = [{"role": "robot", "content": "hi"}]
    before = llama.failed_calls()
    async with (
        gateway_at(llama.base_url, **fast) as url,
        openai.AsyncOpenAI(base_url=url, api_key="sk-client") as sdk,  # max_retries: default
    ):
        with pytest.raises(openai.InternalServerError) as caught:
            await sdk.chat.completions.create(
                model="smollm2",
                messages=robot,  # type: ignore[arg-type]  # an invalid role, on purpose
                max_tokens=2,
            )
    assert caught.value.status_code == 502
    assert caught.value.response.headers["x-should-retry"] == "false"
    for _ in range(100):  # the access log line follows the response by a moment
        if llama.failed_calls() - before >= attempts:
            break
        time.sleep(0.05)
    # levergate's own attempts, not multiplied by the SDK's retries (was 4 x 3 = 12).
    assert llama.failed_calls() - before == attempts


async def test_the_anthropic_sdk_and_the_responses_api_through_levergate(
    llama: LlamaServer, gateway_at: GatewayFactory
) -> None:
    """Both translated protocols against a server levergate did not write: the anthropic SDK's
    /v1/messages and the openai SDK's Responses API become chat calls to llama_cpp.server,
    whole and streamed, and come back in their own wire formats."""
    question = "What is the capital of France?"
    async with (
        gateway_at(llama.base_url, cache={"enabled": False}) as url,
        openai.AsyncOpenAI(base_url=url, api_key="sk-client") as sdk,
        anthropic.AsyncAnthropic(base_url=url.removesuffix("/v1"), api_key="sk-client") as claude,
    ):
        message = await claude.messages.create(
            model="smollm2", max_tokens=6, messages=[{"role": "user", "content": question}]
        )
        assert message.content[0].type == "text"
        assert message.content[0].text
        assert message.usage.output_tokens > 0
        async with claude.messages.stream(
            model="smollm2", max_tokens=6, messages=[{"role": "user", "content": question}]
        ) as stream:
            streamed = "".join([text async for text in stream.text_stream])
        assert streamed
        # Greedy: a sampled answer may run past the cap, and `get_final_response` below needs
        # `response.completed` (one past the cap ends `response.incomplete`).
        response = await sdk.responses.create(
            model="smollm2", input=question, max_output_tokens=64, temperature=0
        )
        assert response.output_text
        assert response.usage is not None
        assert response.usage.output_tokens > 0
        async with sdk.responses.stream(
            model="smollm2", input=question, max_output_tokens=64, temperature=0
        ) as events:
            final = await events.get_final_response()
        assert final.output_text
