"""The official `anthropic` SDK as the client of levergate's `/v1/messages`, through the proxy
(a real socket) and in-process (`Httpx2Transport(gw)`), against the simulator speaking the
OpenAI wire format behind: every lever of the chat pipeline applies to Anthropic clients."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import anthropic
import httpx2
import orjson
import pytest

from levergate import Gateway, Settings
from levergate.core.call import Call, Context
from levergate.core.reply import Completed
from levergate.pipeline import Deps
from levergate.protocol.tokens import TiktokenCounter
from levergate.server.httpx2_transport import Httpx2Transport
from levergate.server.run import serving
from levergate.simulator import SimHandle
from levergate.testing import FakeUpstream
from levergate.upstreams.wire import HttpClient, HttpResponse

MODES = pytest.mark.parametrize("mode", ["proxy", "in_process"])
HI: list[anthropic.types.MessageParam] = [{"role": "user", "content": "Say something simulated."}]
KEY = "sk-gateway-test-key"


@asynccontextmanager
async def claude(
    settings: Settings, mode: str, *, deps: Deps | None = None, api_key: str = KEY
) -> AsyncIterator[anthropic.AsyncAnthropic]:
    async with Gateway(settings, deps=deps) as gateway:
        if mode == "proxy":
            async with serving(gateway) as url:
                base = url.removesuffix("/v1")
                async with anthropic.AsyncAnthropic(
                    base_url=base, api_key=api_key, max_retries=0
                ) as sdk:
                    yield sdk
            return
        http = httpx2.AsyncClient(transport=Httpx2Transport(gateway))
        async with anthropic.AsyncAnthropic(
            base_url="http://levergate.local", api_key=api_key, max_retries=0, http_client=http
        ) as sdk:
            yield sdk


def sim_settings(sim: SimHandle, **values: Any) -> Settings:
    values.setdefault("server", {})["port"] = 0
    return Settings.for_upstream(sim.base_url, **values)


@MODES
async def test_create_and_stream_text(sim: SimHandle, mode: str) -> None:
    async with claude(sim_settings(sim), mode) as sdk:
        message = await sdk.messages.create(
            model="sim-small", max_tokens=6, messages=HI, system="You are terse."
        )
        assert message.type == "message"
        assert message.id.startswith("msg_")
        assert message.stop_reason == "max_tokens"
        assert message.usage.output_tokens == 6
        assert message.usage.input_tokens > 0
        assert message.content[0].type == "text"
        assert len(message.content[0].text.split()) == 6
        async with sdk.messages.stream(model="sim-small", max_tokens=5, messages=HI) as stream:
            pieces = [text async for text in stream.text_stream]
            final = await stream.get_final_message()
        assert len(pieces) == 5
        assert final.content[0].type == "text"
        assert final.content[0].text == "".join(pieces)
        assert final.usage.output_tokens == 5
        assert final.usage.input_tokens > 0


@MODES
async def test_a_tool_result_history_and_cache_control_reach_an_openai_upstream(
    sim: SimHandle, mode: str
) -> None:
    tools: list[anthropic.types.ToolParam] = [
        {
            "name": "get_weather",
            "description": "Get the weather",
            "input_schema": {"type": "object", "properties": {"location": {"type": "string"}}},
            "cache_control": {"type": "ephemeral"},
        }
    ]
    history: list[anthropic.types.MessageParam] = [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": [
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "get_weather",
                    "input": {"location": "Paris"},
                }
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": "15 degrees",
                    "cache_control": {"type": "ephemeral"},
                }
            ],
        },
    ]
    async with claude(sim_settings(sim), mode) as sdk:
        message = await sdk.messages.create(
            model="sim-small",
            max_tokens=4,
            tools=tools,
            messages=history,
            tool_choice={"type": "auto"},
        )
    assert message.content[0].type == "text"
    assert sim.stats()["requests_total"] == 1


@MODES
async def test_count_tokens(sim: SimHandle, mode: str) -> None:
    async with claude(sim_settings(sim), mode) as sdk:
        counted = await sdk.messages.count_tokens(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "Hello, world"}]
        )
        raw = await sdk.messages.with_raw_response.count_tokens(
            model="claude-sonnet-4-5", messages=[{"role": "user", "content": "Hello, world"}]
        )
    # The role and the text through gpt-4o-mini's own tokenizer, plus OpenAI's framing (3 per
    # message, 3 for the reply's priming).
    text = TiktokenCounter().count("user\nHello, world", model="gpt-4o-mini")
    assert text.tokens == 5
    assert counted.input_tokens == text.tokens + 3 + 3
    assert raw.headers["x-levergate-token-count"] == "estimated"  # no Claude tokenizer here
    assert (await raw.parse()).input_tokens > 0
    assert sim.stats()["requests_total"] == 0  # counted locally, nothing generated


@MODES
async def test_error_classes(sim: SimHandle, mode: str) -> None:
    settings = sim_settings(sim, auth={"enabled": True, "keys": [{"key": KEY, "rpm": 2}]})
    async with claude(settings, mode) as sdk:
        video: Any = [{"role": "user", "content": [{"type": "video", "url": "x"}]}]
        with pytest.raises(anthropic.BadRequestError) as bad:
            await sdk.messages.create(model="sim-small", max_tokens=5, messages=video)
        assert bad.value.body == {
            "type": "error",
            "error": {
                "type": "invalid_request_error",
                "message": "messages.0.content.0.type: "
                "unknown or misplaced content block type 'video'",
            },
        }
        await sdk.messages.create(model="sim-small", max_tokens=2, messages=HI)
        with pytest.raises(anthropic.RateLimitError) as limited:
            await sdk.messages.create(
                model="sim-small",
                max_tokens=2,
                messages=HI,
                extra_headers={"x-levergate-timeout": "0.2"},
            )
        assert limited.value.status_code == 429
        assert limited.value.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
    async with claude(settings, mode, api_key="sk-wrong") as sdk:
        with pytest.raises(anthropic.AuthenticationError) as refused:
            await sdk.messages.create(model="sim-small", max_tokens=2, messages=HI)
        assert refused.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]
        with pytest.raises(anthropic.AuthenticationError):
            await sdk.messages.count_tokens(model="sim-small", messages=HI)


@MODES
async def test_an_overloaded_upstream_is_a_529(sim: SimHandle, mode: str) -> None:
    settings = sim_settings(sim, traffic={"retry": {"enabled": False}})
    overloaded = settings.model_copy(
        update={
            "upstreams": [
                settings.upstreams[0].model_copy(update={"headers": {"x-sim-fault": "503"}})
            ]
        }
    )
    async with claude(overloaded, mode) as sdk:
        with pytest.raises(anthropic.APIStatusError) as caught:
            await sdk.messages.create(model="sim-small", max_tokens=2, messages=HI)
    assert caught.value.status_code == 529
    assert isinstance(caught.value, anthropic.OverloadedError)
    assert caught.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]


@MODES
async def test_a_repeated_anthropic_request_is_an_exact_cache_hit(
    sim: SimHandle, mode: str
) -> None:
    # temperature 0 makes the answer cacheable (cache.default.mode: deterministic); the SDK
    # 2.x has no keyword for it, older clients send it as a field.
    zero = {"temperature": 0}
    async with claude(sim_settings(sim), mode) as sdk:
        first = await sdk.messages.create(
            model="sim-small", max_tokens=5, messages=HI, extra_body=zero
        )
        second = await sdk.messages.create(
            model="sim-small", max_tokens=5, messages=HI, extra_body=zero
        )
        async with sdk.messages.stream(
            model="sim-small", max_tokens=5, messages=HI, extra_body=zero
        ) as s:
            replayed = await s.get_final_message()
    assert second.content == first.content
    assert second.usage == first.usage
    assert replayed.content[0].text == first.content[0].text  # type: ignore[union-attr]
    assert sim.stats()["requests_total"] == 1


@MODES
async def test_blocks_an_openai_upstream_cannot_take_are_a_clear_400(
    sim: SimHandle, mode: str
) -> None:
    document: anthropic.types.DocumentBlockParam = {
        "type": "document",
        "source": {"type": "text", "media_type": "text/plain", "data": "A memo."},
    }
    async with claude(sim_settings(sim), mode) as sdk:
        with pytest.raises(anthropic.BadRequestError) as caught:
            await sdk.messages.create(
                model="sim-small",
                max_tokens=5,
                messages=[
                    {"role": "user", "content": [document, {"type": "text", "text": "Summarize."}]}
                ],
            )
        with pytest.raises(anthropic.BadRequestError, match="thinking"):
            await sdk.messages.create(
                model="sim-small",
                max_tokens=2048,
                messages=HI,
                thinking={"type": "enabled", "budget_tokens": 1024},
            )
    assert "cannot express: document" in caught.value.message
    assert sim.stats()["requests_total"] == 0


class ToolCallingWire:
    """The HTTP seam (`upstreams/wire.py`) answered by `FakeUpstream(tool_call=True)`: a
    scripted provider that calls a tool, as OpenAI's wire format carries it."""

    def __init__(self) -> None:
        self.fake = FakeUpstream(tool_call=True, finish="tool_calls")

    async def request(
        self, method: str, url: str, *, body: bytes | None, headers: Mapping[str, str]
    ) -> HttpResponse:
        call = Call(kind="chat", body=orjson.loads(body or b"{}"), ctx=Context(request_id="w"))
        reply = await self.fake(call)
        if isinstance(reply, Completed):
            return _Answer({"content-type": "application/json"}, [reply.raw])
        frames = [b"data: " + event.data + b"\n\n" async for event in reply]
        return _Answer({"content-type": "text/event-stream"}, [*frames, b"data: [DONE]\n\n"])

    async def aclose(self) -> None:
        pass


class _Answer:
    def __init__(self, headers: dict[str, str], parts: list[bytes]) -> None:
        self.status = 200
        self.headers: Mapping[str, str] = headers
        self._parts = parts

    async def read(self) -> bytes:
        return b"".join(self._parts)

    async def chunks(self) -> AsyncIterator[bytes]:
        for part in self._parts:
            yield part

    async def aclose(self) -> None:
        pass


@MODES
async def test_a_model_calling_a_tool_is_a_tool_use_message_and_stream(mode: str) -> None:
    wire = ToolCallingWire()

    def client(_: object) -> HttpClient:
        return wire

    settings = Settings.for_upstream(
        "http://127.0.0.1:9/v1", server={"port": 0}, cache={"enabled": False}
    )
    async with claude(settings, mode, deps=Deps(http_client=client)) as sdk:
        message = await sdk.messages.create(model="m", max_tokens=50, messages=HI)
        async with sdk.messages.stream(model="m", max_tokens=50, messages=HI) as stream:
            events = [event.type async for event in stream]
            final = await stream.get_final_message()
    assert message.stop_reason == "tool_use"
    assert [block.type for block in message.content] == ["tool_use"]
    tool = message.content[0]
    assert tool.type == "tool_use"
    assert (tool.id, tool.name, tool.input) == ("call_1", "lookup", {"city": "Paris"})
    assert message.usage.input_tokens == 7
    # The stream: two content blocks, the second fed by input_json_delta.
    assert final.stop_reason == "tool_use"
    assert [block.type for block in final.content] == ["text", "tool_use"]
    assert final.content[0].text == "Paris is the capital."  # type: ignore[union-attr]
    assert final.content[1].input == {"city": "Paris"}  # type: ignore[union-attr]
    assert events[0] == "message_start"
    assert events[-1] == "message_stop"
    assert events.count("content_block_stop") == 2
