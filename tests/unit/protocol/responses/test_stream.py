"""Golden test of a chat stream translated to Responses events: a text block, then a tool call
(two output items), as OpenAI's chat stream sends them, through `EventWriter`."""

from __future__ import annotations

from typing import Any

from levergate.protocol.responses.stream import EventWriter

HEAD = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4.1"}


def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {**HEAD, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


CHAT_STREAM = [
    chunk({"role": "assistant", "content": ""}),
    chunk({"content": "Let me"}),
    chunk({"content": " check."}),
    chunk({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                           "function": {"name": "get_weather", "arguments": ""}}]}),
    chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"location":'}}]}),
    chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}),
    chunk({}, "tool_calls"),
    {**HEAD, "choices": [], "usage": {"prompt_tokens": 20, "completion_tokens": 9,
                                      "total_tokens": 29,
                                      "prompt_tokens_details": {"cached_tokens": 0}}},
]  # fmt: skip


def run(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    writer = EventWriter({"model": "alias", "input": "x"}, response_id="resp_1", model="gpt-4.1")
    events = writer.open()
    for c in chunks:
        events += writer.feed(c)
    return events + writer.close()


def test_a_text_then_a_tool_call_become_two_items_in_order() -> None:
    events = run(CHAT_STREAM)
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[0]["response"]["status"] == "in_progress"
    assert events[0]["response"]["output"] == []
    text_done = events[6]
    assert text_done["text"] == "Let me check."
    assert (text_done["output_index"], text_done["content_index"]) == (0, 0)
    arguments_done = events[12]
    assert arguments_done["arguments"] == '{"location":"Paris"}'
    assert arguments_done["name"] == "get_weather"
    assert arguments_done["output_index"] == 1
    final = events[-1]["response"]
    assert final["status"] == "completed"
    assert [item["type"] for item in final["output"]] == ["message", "function_call"]
    assert final["output"][1]["call_id"] == "call_1"
    assert final["usage"]["input_tokens"] == 20
    assert final["usage"]["output_tokens"] == 9


def test_a_stream_cut_at_the_cap_ends_incomplete() -> None:
    events = run([chunk({"content": "half"}), chunk({}, "length")])
    assert events[-1]["type"] == "response.incomplete"
    assert events[-1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}


def test_a_failed_stream_reports_what_it_had() -> None:
    writer = EventWriter({"model": "m", "input": "x"}, response_id="resp_1", model="m")
    writer.open()
    writer.feed(chunk({"content": "partial"}))
    (failed,) = writer.fail(code="stream_interrupted", message="cut")
    assert failed["type"] == "response.failed"
    assert failed["response"]["status"] == "failed"
    assert failed["response"]["error"] == {"code": "stream_interrupted", "message": "cut"}
