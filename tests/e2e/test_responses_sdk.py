"""The official `openai` SDK's Responses API through levergate, against the simulator, on both
paths (translated to the simulator's chat completions, and passed through to its native
`/v1/responses`) and both edges (the proxy on loopback, and `GatewayTransport` in-process).
`client.responses.stream` is the SDK helper that checks the event order as it accumulates."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import httpx
import openai
import pytest
from openai.types.responses import Response
from pydantic import BaseModel

from levergate import Gateway, Settings
from levergate.layers.measure.record import RequestRecord
from levergate.pipeline import Deps
from levergate.server.run import serving
from levergate.server.transport import GatewayTransport
from levergate.simulator import SimHandle

TOOLS: list[Any] = [{
    "type": "function", "name": "get_weather", "description": "Weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"], "additionalProperties": False},
    "strict": True,
}]  # fmt: skip
LONG = "You are a careful assistant who answers in plain words. " * 120  # > 1,024 tokens


def settings_for(sim: SimHandle, way: str, **values: Any) -> Settings:
    upstream = {"name": "sim", "base_url": sim.base_url, "responses": way}
    return Settings.load(upstreams=[upstream], models=[{"name": "*", "upstream": "sim"}],
                         server={"port": 0}, **values)  # fmt: skip


@asynccontextmanager
async def sdk_for(sim: SimHandle, way: str, edge: str) -> AsyncIterator[openai.AsyncOpenAI]:
    async with AsyncExitStack() as stack:
        gateway = await stack.enter_async_context(Gateway(settings_for(sim, way)))
        if edge == "proxy":
            url = await stack.enter_async_context(serving(gateway))
            sdk = openai.AsyncOpenAI(base_url=url, api_key="sk-client", max_retries=0)
        else:
            http = httpx.AsyncClient(transport=GatewayTransport(gateway))
            sdk = openai.AsyncOpenAI(base_url="http://levergate.local/v1", api_key="sk-client",
                                     max_retries=0, http_client=http)  # type: ignore[arg-type]  # fmt: skip
        yield await stack.enter_async_context(sdk)


EDGES = pytest.mark.parametrize("edge", ["proxy", "in-process"])


@pytest.fixture(params=["translate", "native"])
def way(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=["proxy", "in-process"])
async def client(
    request: pytest.FixtureRequest, sim: SimHandle, way: str
) -> AsyncIterator[openai.AsyncOpenAI]:
    async with sdk_for(sim, way, str(request.param)) as sdk:
        yield sdk


async def test_create_retrieve_list_input_and_delete(client: openai.AsyncOpenAI) -> None:
    response = await client.responses.create(
        model="m", input="Say hello.", instructions="Be brief."
    )
    assert response.object == "response"
    assert response.id.startswith("resp_")
    assert response.status == "completed"
    assert response.output_text
    assert response.output[0].type == "message"
    usage = response.usage
    assert usage is not None
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens > 0
    again = await client.responses.retrieve(response.id)
    assert again.id == response.id
    assert again.output_text == response.output_text
    items = await client.responses.input_items.list(response.id)
    assert [item.type for item in items.data] == ["message"]
    await client.responses.delete(response.id)
    with pytest.raises(openai.NotFoundError):
        await client.responses.retrieve(response.id)


async def test_the_stream_helper_accepts_the_event_order(client: openai.AsyncOpenAI) -> None:
    deltas: list[str] = []
    types: list[str] = []
    async with client.responses.stream(model="m", input="Tell me a story.") as stream:
        async for event in stream:
            types.append(event.type)
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
        final = await stream.get_final_response()
    assert types[0] == "response.created"
    assert types[-1] == "response.completed"
    assert len(deltas) > 1
    assert final.output_text == "".join(deltas)
    assert final.usage is not None
    assert final.usage.output_tokens > 0
    assert (await client.responses.retrieve(final.id)).output_text == final.output_text


async def test_a_conversation_through_previous_response_id(client: openai.AsyncOpenAI) -> None:
    first = await client.responses.create(model="m", input="My name is Ada.", instructions=LONG)
    second = await client.responses.create(
        model="m", input="What is my name?", instructions=LONG, previous_response_id=first.id
    )
    assert first.usage is not None
    assert second.usage is not None
    # The second turn carries the first one: its prompt is the first prompt, the first answer
    # and the new question, and the provider's prompt cache served the shared prefix.
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens
    assert second.usage.input_tokens_details.cached_tokens > 0
    assert second.previous_response_id == first.id


async def test_unknown_and_unstored_previous_responses_are_404(client: openai.AsyncOpenAI) -> None:
    unkept = await client.responses.create(model="m", input="x", store=False)
    for previous in ("resp_does_not_exist", unkept.id):
        with pytest.raises(openai.NotFoundError) as raised:
            await client.responses.create(model="m", input="x", previous_response_id=previous)
        assert previous in raised.value.message
    with pytest.raises(openai.NotFoundError):
        await client.responses.retrieve("resp_does_not_exist")


async def test_another_tenants_response_is_404(client: openai.AsyncOpenAI) -> None:
    mine = await client.responses.create(model="m", input="x",
                                         extra_headers={"x-levergate-tenant": "acme"})  # fmt: skip
    other = {"x-levergate-tenant": "globex"}
    with pytest.raises(openai.NotFoundError):
        await client.responses.retrieve(mine.id, extra_headers=other)
    with pytest.raises(openai.NotFoundError):
        await client.responses.create(model="m", input="x", previous_response_id=mine.id,
                                      extra_headers=other)  # fmt: skip
    with pytest.raises(openai.NotFoundError):
        await client.responses.delete(mine.id, extra_headers=other)
    own = {"x-levergate-tenant": "acme"}
    assert (await client.responses.retrieve(mine.id, extra_headers=own)).id == mine.id


async def test_malformed_items_are_400_naming_them(client: openai.AsyncOpenAI) -> None:
    wizard: list[Any] = [{"role": "wizard", "content": "x"}]
    with pytest.raises(openai.BadRequestError) as raised:
        await client.responses.create(model="m", input=wizard)
    assert "input[0]" in raised.value.message
    with pytest.raises(openai.BadRequestError) as raised:
        await client.responses.create(model="m", input=["x"] * 3000)  # type: ignore[list-item]
    assert "input" in raised.value.message


@EDGES
async def test_native_function_call_round_trip_and_structured_output(
    sim: SimHandle, edge: str
) -> None:
    """The simulator's native route calls tools and fills schemas (its chat route does neither:
    the translated answer side is tested over a scripted chat answer in the unit tests)."""
    async with sdk_for(sim, "native", edge) as client:
        await native_round_trip(client)


async def native_round_trip(client: openai.AsyncOpenAI) -> None:
    asked = await client.responses.create(model="m", input="Call get_weather for Paris.",
                                          tools=TOOLS)  # fmt: skip
    (call,) = asked.output
    assert call.type == "function_call"
    assert call.name == "get_weather"
    result = {"type": "function_call_output", "call_id": call.call_id, "output": "14C, sunny"}
    answered = await client.responses.create(model="m", input=[result], tools=TOOLS,  # type: ignore[list-item]
                                             previous_response_id=asked.id)  # fmt: skip
    assert answered.output[0].type == "message"
    assert answered.output_text

    class City(BaseModel):
        name: str
        population: int

    parsed = await client.responses.parse(model="m", input="A city, please.", text_format=City)
    assert isinstance(parsed.output_parsed, City)


@EDGES
async def test_a_client_side_function_call_round_trip_is_translated(
    sim: SimHandle, edge: str
) -> None:
    """The request half of a round trip on the translated path: the model's call and its
    output, sent back as items, become a chat tool call and a tool message the upstream takes."""
    items: list[Any] = [
        {"role": "user", "content": "Weather in Paris?"},
        {"type": "function_call", "call_id": "call_7", "name": "get_weather",
         "arguments": '{"city":"Paris"}'},
        {"type": "function_call_output", "call_id": "call_7", "output": "14C, sunny"},
    ]  # fmt: skip
    async with sdk_for(sim, "translate", edge) as client:
        answer = await client.responses.create(model="m", input=items, tools=TOOLS)
    assert answer.status == "completed"
    assert answer.output[0].type == "message"
    assert answer.output_text


@EDGES
async def test_what_chat_cannot_express_is_400_when_translating(sim: SimHandle, edge: str) -> None:
    async with sdk_for(sim, "translate", edge) as client:
        await refused_when_translating(client)


async def refused_when_translating(client: openai.AsyncOpenAI) -> None:
    tools: list[Any] = [{"type": "web_search_preview"}]
    with pytest.raises(openai.BadRequestError) as raised:
        await client.responses.create(model="m", input="news?", tools=tools)
    assert "tools[0].type" in raised.value.message
    with pytest.raises(openai.BadRequestError) as raised:
        await client.responses.create(model="m", input="x", background=True)
    assert "background" in raised.value.message


async def test_the_simulator_speaks_the_responses_api_to_the_sdk(sim: SimHandle) -> None:
    async with openai.AsyncOpenAI(base_url=sim.base_url, api_key="k", max_retries=0) as direct:
        first = await direct.responses.create(model="m", input="hi", instructions=LONG)
        second = await direct.responses.create(model="m", input="more", instructions=LONG,
                                               previous_response_id=first.id)  # fmt: skip
        assert second.usage is not None
        assert second.usage.input_tokens_details.cached_tokens > 0
        natural = {"x-sim-output-tokens": "5"}
        async with direct.responses.stream(
            model="m", input="go", max_output_tokens=16, extra_headers=natural
        ) as stream:
            final = await stream.get_final_response()
        assert final.usage is not None
        assert final.usage.output_tokens == 5
        with pytest.raises(openai.NotFoundError):
            await direct.responses.create(model="m", input="x", previous_response_id="resp_x")
        other = openai.AsyncOpenAI(base_url=sim.base_url, api_key="another", max_retries=0)
        async with other:
            with pytest.raises(openai.NotFoundError):
                await other.responses.retrieve(first.id)


class Records:
    """A sink: every finished request's record."""

    def __init__(self) -> None:
        self.seen: list[RequestRecord] = []

    def emit(self, record: RequestRecord) -> None:
        self.seen.append(record)


@pytest.mark.parametrize("stream", [False, True])
async def test_measure_reads_tokens_and_ttft_of_both_paths(
    sim: SimHandle, way: str, stream: bool
) -> None:
    """Usage in the Responses convention (cached inside input) lands in the request record's
    four buckets, from a whole answer and from a stream's final event, on both paths."""
    records = Records()
    settings = settings_for(sim, way)
    async with Gateway(settings, deps=Deps(sinks=[records])) as gateway:
        http = httpx.AsyncClient(transport=GatewayTransport(gateway))
        sdk = openai.AsyncOpenAI(base_url="http://levergate.local/v1", api_key="k", max_retries=0,
                                 http_client=http)  # type: ignore[arg-type]  # fmt: skip
        async with sdk:
            answer: Response
            for _ in range(2):  # the second is served from the simulator's prompt cache
                if stream:
                    async with sdk.responses.stream(model="m", input="hi", instructions=LONG) as s:
                        answer = await s.get_final_response()
                else:
                    answer = await sdk.responses.create(model="m", input="hi", instructions=LONG)
        for _ in range(50):
            if len(records.seen) == 2:
                break
            await asyncio.sleep(0.01)
    record = records.seen[-1]
    assert record.kind == "response"
    assert record.outcome == "ok"
    usage = answer.usage
    assert usage is not None
    assert record.tokens.output == usage.output_tokens
    assert record.tokens.input == usage.input_tokens
    assert record.tokens.cached_read == usage.input_tokens_details.cached_tokens > 0
    if stream:
        assert record.timings.ttft is not None


@EDGES
async def test_with_auth_on_a_response_belongs_to_the_keys_tenant(
    sim: SimHandle, edge: str
) -> None:
    keys = [{"key": "sk-acme-0123456789abcdef", "tenant": "acme"},
            {"key": "sk-globex-0123456789abcdef", "tenant": "globex"}]  # fmt: skip
    settings = settings_for(sim, "translate", auth={"enabled": True, "keys": keys})
    async with AsyncExitStack() as stack:
        gateway = await stack.enter_async_context(Gateway(settings))

        async def sdk(key: str) -> openai.AsyncOpenAI:
            if edge == "proxy":
                url = await stack.enter_async_context(serving(gateway))
                return openai.AsyncOpenAI(base_url=url, api_key=key, max_retries=0)
            http = httpx.AsyncClient(transport=GatewayTransport(gateway))
            return openai.AsyncOpenAI(base_url="http://levergate.local/v1", api_key=key,
                                      max_retries=0, http_client=http)  # type: ignore[arg-type]  # fmt: skip

        acme, globex = await sdk(keys[0]["key"]), await sdk(keys[1]["key"])
        mine = await acme.responses.create(model="m", input="x")
        assert (await acme.responses.retrieve(mine.id)).id == mine.id
        with pytest.raises(openai.NotFoundError):
            await globex.responses.retrieve(mine.id)
        with pytest.raises(openai.NotFoundError):
            await globex.responses.create(model="m", input="y", previous_response_id=mine.id)
        nobody = await sdk("sk-nobody-0123456789abcdef")
        with pytest.raises(openai.AuthenticationError):
            await nobody.responses.retrieve(mine.id)
        for client in (acme, globex, nobody):
            await client.close()
