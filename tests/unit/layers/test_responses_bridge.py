"""ResponsesBridge over a fake chat upstream: the translated function-call round trip, the
conversation kept per tenant, `store: false`, and the native path's ownership check."""

from __future__ import annotations

from typing import Any

import pytest

from levergate.config import ResponsesSettings
from levergate.core.call import Call, Context
from levergate.core.controls import Principal
from levergate.core.reply import Completed, Event, Reply, Stream
from levergate.errors import BadRequest, NotFound, UpstreamUnavailable
from levergate.layers.responses import ResponsesBridge
from levergate.stores.responses import ResponseStore
from levergate.stores.tenant_kv import Bounds, MemoryTenantKV
from levergate.testing import FakeUpstream, ManualClock

TOOLS = [{"type": "function", "name": "lookup", "parameters": {"type": "object"}}]


def memory(size: int) -> MemoryTenantKV:
    return MemoryTenantKV(bounds=Bounds(size, size, ttl=3600), clock=ManualClock())


def bridge(inner: Any, *, native: bool = False) -> ResponsesBridge:
    settings = ResponsesSettings()
    store = ResponseStore(memory(1 << 24), settings=settings, timeout=1)
    return ResponsesBridge(inner, settings=settings, store=store, native=lambda _: native)


def call(body: dict[str, Any], *, tenant: str = "a") -> Call:
    return Call(
        kind="response",
        body={"model": "m", **body},
        ctx=Context("r", principal=Principal(tenant=tenant)),
    )


async def whole(reply: Reply) -> dict[str, Any]:
    assert isinstance(reply, Completed)
    return reply.data


async def events(reply: Reply) -> list[dict[str, Any]]:
    assert isinstance(reply, Stream)
    try:
        return [event.json() async for event in reply]
    finally:
        await reply.aclose()


async def test_a_function_call_round_trip_through_chat() -> None:
    upstream = FakeUpstream(tool_call=True)
    gate = bridge(upstream)
    first = await whole(await gate(call({"input": "where is Paris?", "tools": TOOLS})))
    (item,) = first["output"]
    assert item["type"] == "function_call"
    assert (item["call_id"], item["name"]) == ("call_1", "lookup")
    assert upstream.calls[0].kind == "chat"
    upstream.tool_call = False
    output = {"type": "function_call_output", "call_id": "call_1", "output": "in France"}
    second = await whole(await gate(call({"input": [output], "tools": TOOLS,
                                          "previous_response_id": first["id"]})))  # fmt: skip
    assert second["output"][0]["type"] == "message"
    assert second["previous_response_id"] == first["id"]
    sent = upstream.calls[1].body["messages"]
    assert sent == [
        {"role": "user", "content": "where is Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function",
         "function": {"name": "lookup", "arguments": '{"city":"Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "in France"},
    ]  # fmt: skip


async def test_a_streamed_answer_is_kept_and_continued() -> None:
    upstream = FakeUpstream(words=("hello", "world"))
    gate = bridge(upstream)
    seen = await events(await gate(call({"input": "hi", "stream": True})))
    final = seen[-1]
    assert final["type"] == "response.completed"
    assert final["response"]["output"][0]["content"][0]["text"] == "hello world"
    assert final["response"]["usage"]["output_tokens"] == 2
    await whole(
        await gate(call({"input": "again", "previous_response_id": final["response"]["id"]}))
    )
    assert [m["content"] for m in upstream.calls[1].body["messages"]] == [
        "hi", "hello world", "again"]  # fmt: skip


async def test_a_cut_stream_fails_the_response_and_keeps_nothing() -> None:
    upstream = FakeUpstream(words=("a", "b", "c"), cut_after=2)
    gate = bridge(upstream)
    reply = await gate(call({"input": "hi", "stream": True}))
    assert isinstance(reply, Stream)
    seen: list[dict[str, Any]] = []

    async def drain() -> None:
        async for event in reply:
            seen.append(event.json())  # noqa: PERF401 - what came before the failure counts

    with pytest.raises(UpstreamUnavailable, match="cut"):
        await drain()
    await reply.aclose()
    assert seen[-1]["type"] == "response.failed"
    with pytest.raises(NotFound):
        await gate(call({"input": "x", "previous_response_id": seen[-1]["response"]["id"]}))


async def test_another_tenants_response_and_an_unstored_one_are_not_found() -> None:
    gate = bridge(FakeUpstream())
    kept = await whole(await gate(call({"input": "hi"})))
    unkept = await whole(await gate(call({"input": "hi", "store": False})))
    for previous, tenant in ((kept["id"], "b"), (unkept["id"], "a"), ("resp_made_up", "a")):
        with pytest.raises(NotFound) as raised:
            await gate(call({"input": "x", "previous_response_id": previous}, tenant=tenant))
        assert raised.value.param == "previous_response_id"
    await gate(call({"input": "x", "previous_response_id": kept["id"]}, tenant="a"))


async def test_native_calls_pass_unchanged_and_their_ids_belong_to_their_tenant() -> None:
    sent: list[Call] = []
    answer = {"id": "resp_up_1", "object": "response", "status": "completed", "output": []}

    async def upstream(c: Call) -> Reply:
        sent.append(c)
        return Completed(data=answer)

    gate = bridge(upstream, native=True)
    body = {"input": "hi", "tools": [{"type": "web_search_preview"}], "include": ["x"]}
    assert await whole(await gate(call(body))) == answer
    assert sent[0].kind == "response"
    assert sent[0].body == {"model": "m", **body}
    with pytest.raises(NotFound):
        await gate(call({"input": "x", "previous_response_id": "resp_up_1"}, tenant="b"))
    assert len(sent) == 1  # refused before anything went upstream
    await gate(call({"input": "x", "previous_response_id": "resp_up_1"}))
    assert sent[-1].body["previous_response_id"] == "resp_up_1"


async def test_a_conversation_cannot_switch_between_native_and_translated() -> None:
    store_side = bridge(FakeUpstream())
    kept = await whole(await store_side(call({"input": "hi"})))
    native = ResponsesBridge(
        FakeUpstream(), settings=ResponsesSettings(), store=store_side._store,
        native=lambda _: True,
    )  # fmt: skip
    with pytest.raises(BadRequest) as raised:
        await native(call({"input": "x", "previous_response_id": kept["id"]}))
    assert raised.value.param == "previous_response_id"


async def test_a_conversation_over_the_item_limit_is_refused() -> None:
    settings = ResponsesSettings(max_conversation_items=3)
    store = ResponseStore(memory(1 << 20), settings=settings, timeout=1)
    gate = ResponsesBridge(FakeUpstream(), settings=settings, store=store, native=lambda _: False)
    first = await whole(await gate(call({"input": "one"})))
    items = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    with pytest.raises(BadRequest) as raised:
        await gate(call({"input": items, "previous_response_id": first["id"]}))
    assert raised.value.code == "conversation_too_long"


async def test_other_calls_pass_untouched() -> None:
    upstream = FakeUpstream()
    gate = bridge(upstream)
    chat = Call(kind="chat", body={"model": "m", "messages": []}, ctx=Context("r"))
    assert isinstance(await gate(chat), Completed)
    assert upstream.calls == [chat]


async def test_a_native_stream_is_kept_from_its_terminal_event() -> None:
    final = {"id": "resp_up_2", "object": "response", "status": "completed", "output": []}

    async def source() -> Any:
        yield Event.of({"type": "response.created", "response": {**final, "status": "x"}})
        yield Event.of({"type": "response.completed", "response": final})

    async def upstream(c: Call) -> Reply:
        return Stream(source())

    gate = bridge(upstream, native=True)
    await events(await gate(call({"input": "hi", "stream": True})))
    await gate(call({"input": "x", "previous_response_id": "resp_up_2"}))
