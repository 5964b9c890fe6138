"""A `kind: anthropic` upstream end to end: the official OpenAI SDK -> the gateway on loopback
-> the simulator speaking Anthropic Messages. Chat, streams, a tool round trip, 429 with
`retry-after` retried after the wait, 529 overloaded retried and sent to a fallback, and the
usage contract with prompt-cache tokens. Assertions are about what the client saw and what
reached the provider, never about time."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import openai
import pytest

from levergate.config import Settings
from levergate.gateway import Gateway
from levergate.server.run import serving
from levergate.simulator import SimHandle, SimSettings, run_simulator

KEY = "sk-ant-sim-0123456789"
WEATHER: Any = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather of a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city"],
        },
    },
}

Proxy = Callable[..., AbstractAsyncContextManager[openai.AsyncOpenAI]]


@pytest.fixture
async def claude_sim() -> AsyncIterator[SimHandle]:
    async with run_simulator(SimSettings(port=0)) as handle:
        yield handle


@pytest.fixture
def proxy() -> Proxy:
    """`async with proxy(sim, backup=None, **settings) as client:` the gateway on a free port
    with model `claude` on a kind-anthropic upstream (and `backup` as its fallback, an
    OpenAI-compatible upstream, when given)."""

    @asynccontextmanager
    async def start(
        sim: SimHandle, *, backup: SimHandle | None = None, **values: Any
    ) -> AsyncIterator[openai.AsyncOpenAI]:
        upstreams: list[dict[str, Any]] = [
            {"kind": "anthropic", "name": "anthropic", "base_url": sim.root_url, "api_key": KEY}
        ]
        models: list[dict[str, Any]] = [
            {"name": "claude", "upstream": "anthropic", "upstream_model": "claude-sim-4"}
        ]
        if backup is not None:
            upstreams.append({"name": "openai", "base_url": backup.base_url})
            models[0]["fallbacks"] = ["backup"]
            models.append({"name": "backup", "upstream": "openai"})
        values.setdefault("server", {})["port"] = 0
        settings = Settings.load(upstreams=upstreams, models=models, **values)
        async with Gateway(settings) as gateway, serving(gateway) as url:
            client = openai.AsyncOpenAI(base_url=url, api_key="unused", max_retries=0)
            async with client:
                yield client

    return start


def anthropic_requests(sim: SimHandle) -> int:
    return int(sim.stats()["requests_by_endpoint"].get("/v1/messages", 0))


async def test_chat_and_stream_through_an_anthropic_upstream(
    proxy: Proxy, claude_sim: SimHandle
) -> None:
    async with proxy(claude_sim) as client:
        reply = await client.chat.completions.create(
            model="claude",
            messages=[
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Say something."},
            ],
            max_tokens=64,
        )
        choice = reply.choices[0]
        assert choice.finish_reason == "stop"
        assert choice.message.content
        assert reply.id.startswith("msg_")
        assert reply.usage is not None
        assert reply.usage.completion_tokens == len(choice.message.content.split())
        raw = await client.chat.completions.with_raw_response.create(
            model="claude", messages=[{"role": "user", "content": "Say more."}], max_tokens=3
        )
        assert raw.parse().choices[0].finish_reason == "length"
        # Anthropic's request id reaches the client renamed (x-request-id is levergate's).
        assert raw.headers["x-upstream-request-id"].startswith("req_")
        stream = await client.chat.completions.create(
            model="claude",
            messages=[{"role": "user", "content": "Stream it."}],
            max_tokens=64,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = [chunk async for chunk in stream]
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert chunks[0].choices[0].delta.role == "assistant"
        assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
        assert chunks[-1].usage is not None
        assert chunks[-1].usage.completion_tokens == len(text.split())
        plain = await client.chat.completions.create(
            model="claude", messages=[{"role": "user", "content": "No usage."}], stream=True
        )
        assert all([c.choices async for c in plain])  # no usage chunk unless asked
    assert anthropic_requests(claude_sim) == 4
    assert claude_sim.stats()["requests_by_key"] == {"sk-...6789": 4}


async def test_tool_round_trip(proxy: Proxy, claude_sim: SimHandle) -> None:
    ask: list[Any] = [{"role": "user", "content": "Please use get_weather for Paris."}]
    async with proxy(claude_sim) as client:
        first = await client.chat.completions.create(
            model="claude", messages=ask, tools=[WEATHER], max_tokens=64
        )
        assert first.choices[0].finish_reason == "tool_calls"
        calls = first.choices[0].message.tool_calls
        assert calls is not None
        assert len(calls) == 1
        call = calls[0]
        assert call.function.name == "get_weather"  # type: ignore[union-attr]
        arguments = json.loads(call.function.arguments)  # type: ignore[union-attr]
        assert set(arguments) == {"city", "days"}
        assert arguments["days"] == 42
        follow_up = [
            *ask,
            first.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "18 C and sunny"},
        ]
        second = await client.chat.completions.create(
            model="claude", messages=follow_up, tools=[WEATHER], max_tokens=64
        )
        assert second.choices[0].finish_reason == "stop"
        assert second.choices[0].message.tool_calls is None
        assert second.choices[0].message.content
        stream = await client.chat.completions.create(
            model="claude", messages=ask, tools=[WEATHER], max_tokens=64, stream=True
        )
        fragments: dict[int, dict[str, str]] = {}
        finish = None
        async for chunk in stream:
            for delta_call in chunk.choices[0].delta.tool_calls or []:
                entry = fragments.setdefault(delta_call.index, {"name": "", "arguments": ""})
                if delta_call.function and delta_call.function.name:
                    entry["name"] = delta_call.function.name
                if delta_call.function and delta_call.function.arguments:
                    entry["arguments"] += delta_call.function.arguments
            finish = chunk.choices[0].finish_reason or finish
        assert finish == "tool_calls"
        assert fragments[0]["name"] == "get_weather"
        assert json.loads(fragments[0]["arguments"]) == arguments


async def test_what_anthropic_cannot_express_is_a_400(proxy: Proxy, claude_sim: SimHandle) -> None:
    async with proxy(claude_sim) as client:
        with pytest.raises(openai.BadRequestError) as caught:
            await client.chat.completions.create(
                model="claude", messages=[{"role": "user", "content": "x"}], n=2
            )
        assert "'n'" in caught.value.message
        with pytest.raises(openai.BadRequestError):
            await client.embeddings.create(model="claude", input="x")
    assert anthropic_requests(claude_sim) == 0


async def test_a_429_is_retried_after_its_retry_after(proxy: Proxy, claude_sim: SimHandle) -> None:
    claude_sim.configure({"limits": {"rpm": 1, "window_seconds": 1.0}})
    retry = {"budget_min_per_second": 20, "max_attempts": 4}
    async with proxy(claude_sim, traffic={"retry": retry}) as client:
        for _ in range(2):
            raw = await client.chat.completions.with_raw_response.create(
                model="claude", messages=[{"role": "user", "content": "hi"}], max_tokens=4
            )
            assert raw.parse().choices[0].message.content
            assert raw.headers["anthropic-ratelimit-requests-limit"] == "1"
    stats = claude_sim.stats()
    # The second call met the limit once, and its retry waited for the window: it was not
    # refused again.
    assert stats["rate_limited"] == 1
    assert anthropic_requests(claude_sim) == 3


async def test_529_overloaded_is_retried_then_falls_back(
    proxy: Proxy, claude_sim: SimHandle
) -> None:
    claude_sim.configure({"faults": {"overloaded_rate": 1.0}})
    retry = {"budget_min_per_second": 20, "max_attempts": 2, "base_seconds": 0.01}
    async with run_simulator(SimSettings(port=0)) as backup:
        async with proxy(claude_sim, backup=backup, traffic={"retry": retry}) as client:
            reply = await client.chat.completions.create(
                model="claude", messages=[{"role": "user", "content": "hi"}], max_tokens=4
            )
        assert reply.id.startswith("chatcmpl-")  # the OpenAI-compatible backup answered
        assert backup.stats()["requests_by_endpoint"]["/v1/chat/completions"] == 1
    assert claude_sim.stats()["responses_by_status"] == {"529": 2}
    async with proxy(claude_sim, traffic={"retry": retry}) as client:
        with pytest.raises(openai.APIStatusError) as caught:
            await client.chat.completions.create(
                model="claude", messages=[{"role": "user", "content": "hi"}], max_tokens=4
            )
    assert caught.value.status_code == 502
    error = caught.value.body
    assert isinstance(error, dict)
    assert error["type"] == "overloaded_error"


async def test_usage_carries_anthropic_cache_tokens(proxy: Proxy, claude_sim: SimHandle) -> None:
    long_rules = "Follow these house rules carefully. " * 200  # ~1800 tokens
    system: Any = {
        "role": "system",
        "content": [
            {
                "type": "text",
                "text": long_rules,
                "cache_control": {"type": "ephemeral", "ttl": "1h"},
            }
        ],
    }
    async with proxy(claude_sim) as client:
        first = await client.chat.completions.create(
            model="claude", messages=[system, {"role": "user", "content": "One?"}], max_tokens=4
        )
        second = await client.chat.completions.create(
            model="claude", messages=[system, {"role": "user", "content": "Two?"}], max_tokens=4
        )
    assert first.usage is not None
    assert second.usage is not None
    one, two = first.usage.model_dump(), second.usage.model_dump()
    written = one["cache_creation_input_tokens"]
    assert written > 1024
    assert one["cache_creation"] == {
        "ephemeral_5m_input_tokens": 0,
        "ephemeral_1h_input_tokens": written,
    }
    assert one["prompt_tokens_details"]["cached_tokens"] == 0
    assert two["cache_read_input_tokens"] == written
    assert two["cache_creation_input_tokens"] == 0
    assert two["prompt_tokens_details"]["cached_tokens"] == written
    # prompt_tokens counts every input token, cached or not: the same prompt length both times.
    assert one["prompt_tokens"] == two["prompt_tokens"] > written
    assert one["total_tokens"] == one["prompt_tokens"] + one["completion_tokens"]
