"""Golden tests of the Responses <-> chat-completions translation, on payload shapes from
OpenAI's API reference (the function-calling guide's round trip, the input-image example)."""

from __future__ import annotations

from typing import Any

import pytest

from levergate.config import ResponsesSettings
from levergate.errors import BadRequest
from levergate.protocol.responses.answer import (
    events_of,
    output_text,
    response_from_chat,
    usage_from_chat,
)
from levergate.protocol.responses.request import check, to_chat

WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Get current temperature for a given location.",
    "parameters": {
        "type": "object",
        "properties": {"location": {"type": "string"}},
        "required": ["location"],
        "additionalProperties": False,
    },
    "strict": True,
}


def test_a_string_input_with_instructions_becomes_a_system_and_a_user_message() -> None:
    body = {"model": "gpt-4.1", "instructions": "Talk like a pirate.",
            "input": "Are semicolons optional in JavaScript?", "max_output_tokens": 64,
            "temperature": 0.2}  # fmt: skip
    assert to_chat(body, history=[]) == {
        "model": "gpt-4.1",
        "messages": [
            {"role": "system", "content": "Talk like a pirate."},
            {"role": "user", "content": "Are semicolons optional in JavaScript?"},
        ],
        "max_tokens": 64,
        "temperature": 0.2,
    }


def test_input_items_with_text_and_an_image_become_chat_content_parts() -> None:
    body = {
        "model": "gpt-4.1",
        "input": [
            {"role": "developer", "content": "Describe images briefly."},
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "what's in this image?"},
                    {"type": "input_image", "image_url": "https://example.com/a.jpg",
                     "detail": "low"},
                ],
            },
        ],
    }  # fmt: skip
    assert to_chat(body, history=[])["messages"] == [
        {"role": "system", "content": "Describe images briefly."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "what's in this image?"},
                {"type": "image_url", "image_url": {"url": "https://example.com/a.jpg",
                                                    "detail": "low"}},
            ],
        },
    ]  # fmt: skip


def test_typed_text_parts_become_one_string_as_every_chat_server_takes() -> None:
    """What the Agents SDK sends: every turn's text as typed parts."""
    body = {
        "model": "m",
        "input": [
            {"role": "developer", "content": [{"type": "input_text", "text": "Be brief."},
                                              {"type": "input_text", "text": "Be exact."}]},
            {"role": "user", "content": [{"type": "input_text", "text": "What is 2+2?"}]},
            {"role": "user", "content": [{"type": "input_text", "text": "One."},
                                         {"type": "input_text", "text": "Two."}]},
            {"role": "assistant", "content": [{"type": "output_text", "text": "Fo"},
                                              {"type": "output_text", "text": "ur."}]},
        ],
    }  # fmt: skip
    assert to_chat(body, history=[])["messages"] == [
        {"role": "system", "content": "Be brief.\nBe exact."},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "user", "content": "One.\nTwo."},
        {"role": "assistant", "content": "Four."},  # one answer cut in pieces: joined as is
    ]


def test_a_function_call_round_trip_becomes_an_assistant_tool_call_and_a_tool_message() -> None:
    """The function-calling guide's second request: the model's call and its output sent back."""
    call = {"type": "function_call", "id": "fc_12345xyz", "call_id": "call_12345xyz",
            "name": "get_weather", "arguments": '{"location":"Paris, France"}'}  # fmt: skip
    body = {
        "model": "gpt-4.1",
        "tools": [WEATHER_TOOL],
        "tool_choice": {"type": "function", "name": "get_weather"},
        "parallel_tool_calls": False,
        "input": [
            {"role": "user", "content": "What is the weather like in Paris today?"},
            call,
            {"type": "function_call_output", "call_id": "call_12345xyz", "output": "14°C"},
        ],
    }
    chat = to_chat(body, history=[])
    assert chat["messages"] == [
        {"role": "user", "content": "What is the weather like in Paris today?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_12345xyz", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"location":"Paris, France"}'}},
        ]},
        {"role": "tool", "tool_call_id": "call_12345xyz", "content": "14°C"},
    ]  # fmt: skip
    assert chat["tools"] == [{"type": "function", "function": {
        "name": "get_weather", "description": WEATHER_TOOL["description"],
        "parameters": WEATHER_TOOL["parameters"], "strict": True}}]  # fmt: skip
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert chat["parallel_tool_calls"] is False


def test_the_history_comes_before_this_turn_and_instructions_are_not_carried_over() -> None:
    history: list[dict[str, Any]] = [
        {"type": "message", "role": "user", "content": "tell me a joke"},
        {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": "Why did...", "annotations": []}]},
    ]  # fmt: skip
    body = {"model": "m", "input": "tell me another", "instructions": "be short"}
    assert to_chat(body, history=history)["messages"] == [
        {"role": "system", "content": "be short"},
        {"role": "user", "content": "tell me a joke"},
        {"role": "assistant", "content": "Why did..."},
        {"role": "user", "content": "tell me another"},
    ]


def test_structured_output_becomes_a_response_format() -> None:
    schema = {"type": "object", "properties": {"name": {"type": "string"}},
              "required": ["name"], "additionalProperties": False}  # fmt: skip
    body = {"model": "m", "input": "x", "text": {"format": {
        "type": "json_schema", "name": "person", "schema": schema, "strict": True}}}  # fmt: skip
    assert to_chat(body, history=[])["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "person", "schema": schema, "strict": True},
    }
    body["text"] = {"format": {"type": "json_object"}}
    assert to_chat(body, history=[])["response_format"] == {"type": "json_object"}


def test_a_stream_asks_chat_for_its_usage_chunk() -> None:
    chat = to_chat({"model": "m", "input": "x", "stream": True}, history=[])
    assert chat["stream"] is True
    assert chat["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"tools": [{"type": "web_search_preview"}]}, "tools[0].type"),
        ({"tools": [WEATHER_TOOL, {"type": "file_search", "vector_store_ids": ["v"]}]},
         "tools[1].type"),
        ({"input": [{"type": "reasoning", "id": "rs_1", "summary": []}]}, "input[0]"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0]"),
        ({"input": [{"type": "computer_call_output", "call_id": "c", "output": {}}]}, "input[0]"),
        ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]},
         "input[0].content[0]"),
        ({"input": [{"role": "user", "content": [{"type": "input_audio"}]}]},
         "input[0].content[0]"),
        ({"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}]},
         "input[0].content[0].file_id"),
        ({"background": True}, "background"),
        ({"include": ["file_search_call.results"]}, "include"),
        ({"truncation": "auto"}, "truncation"),
        ({"reasoning": {"summary": "auto"}}, "reasoning.summary"),
        ({"tool_choice": {"type": "web_search_preview"}}, "tool_choice"),
        ({"frequency_penalty": 1}, "frequency_penalty"),
    ],
)  # fmt: skip
def test_what_chat_cannot_express_is_a_400_naming_it(change: dict[str, Any], named: str) -> None:
    with pytest.raises(BadRequest) as raised:
        to_chat({"model": "m", "input": "x", **change}, history=[])
    assert raised.value.param == named
    assert named.split(".", maxsplit=1)[0].split("[", maxsplit=1)[0] in raised.value.message


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"model": "m"}, "input"),
        ({"model": "m", "input": 3}, "input"),
        ({"model": "m", "input": "x", "store": "yes"}, "store"),
        ({"model": "m", "input": "x", "previous_response_id": ""}, "previous_response_id"),
        ({"model": "m", "input": "x", "previous_response_id": "r" * 500}, "previous_response_id"),
        ({"model": "m", "input": ["x"] * 3000}, "input"),
    ],
)
def test_malformed_bodies_are_a_400_naming_the_field(body: dict[str, Any], named: str) -> None:
    with pytest.raises(BadRequest) as raised:
        check(body, settings=ResponsesSettings())
    assert raised.value.param == named


def test_malformed_items_are_a_400_naming_them() -> None:
    for items, named in [
        (["just a string"], "input[0]"),
        ([{"role": "wizard", "content": "x"}], "input[0].role"),
        ([{"type": "function_call", "call_id": "c", "name": "f"}], "input[0].arguments"),
        ([{"type": "function_call_output", "call_id": "c", "output": 3}], "input[0].output"),
        ([{"content": "no type, no role"}], "input[0]"),
    ]:
        with pytest.raises(BadRequest) as raised:
            to_chat({"model": "m", "input": items}, history=[])
        assert raised.value.param == named, items


CHAT_ANSWER = {
    "id": "chatcmpl-1", "object": "chat.completion", "created": 1741476542, "model": "gpt-4.1",
    "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": "Let me check.", "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"location":"Paris"}'}}]}}],
    "usage": {"prompt_tokens": 2006, "completion_tokens": 300, "total_tokens": 2306,
              "prompt_tokens_details": {"cached_tokens": 1920},
              "completion_tokens_details": {"reasoning_tokens": 0}},
}  # fmt: skip


def test_a_chat_answer_becomes_a_response_object() -> None:
    body = {"model": "alias", "input": "weather?", "tools": [WEATHER_TOOL], "store": True,
            "metadata": {"feature": "x"}}  # fmt: skip
    response = response_from_chat(body, CHAT_ANSWER, response_id="resp_1")
    assert response["id"] == "resp_1"
    assert response["object"] == "response"
    assert response["status"] == "completed"
    assert response["model"] == "gpt-4.1"
    assert response["created_at"] == 1741476542
    assert response["tools"] == [WEATHER_TOOL]
    assert response["metadata"] == {"feature": "x"}
    message, call = response["output"]
    assert message["type"] == "message"
    assert message["role"] == "assistant"
    assert message["content"] == [
        {"type": "output_text", "text": "Let me check.", "annotations": [], "logprobs": []}
    ]
    assert {k: call[k] for k in ("type", "call_id", "name", "arguments", "status")} == {
        "type": "function_call", "call_id": "call_1", "name": "get_weather",
        "arguments": '{"location":"Paris"}', "status": "completed"}  # fmt: skip
    assert call["id"].startswith("fc_")
    assert response["usage"] == {
        "input_tokens": 2006, "input_tokens_details": {"cached_tokens": 1920},
        "output_tokens": 300, "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 2306,
    }  # fmt: skip
    assert output_text(response) == "Let me check."


def test_an_answer_cut_at_the_cap_is_incomplete() -> None:
    message = {"role": "assistant", "content": "half"}
    chat = {"model": "m", "choices": [{"index": 0, "finish_reason": "length", "message": message}]}
    response = response_from_chat({"model": "m", "input": "x"}, chat, response_id="resp_2")
    assert response["status"] == "incomplete"
    assert response["incomplete_details"] == {"reason": "max_output_tokens"}
    assert response["usage"] is None


def test_a_response_replayed_as_events_rebuilds_the_same_output() -> None:
    body = {"model": "m", "input": "x", "tools": [WEATHER_TOOL]}
    response = response_from_chat(body, CHAT_ANSWER, response_id="resp_3")
    events = list(events_of(response, split=list))
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[0]["type"] == "response.created"
    assert events[-1] == {"type": "response.completed", "response": response,
                          "sequence_number": len(events) - 1}  # fmt: skip
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    arguments = "".join(
        e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta"
    )
    assert text == "Let me check."
    assert arguments == '{"location":"Paris"}'


def test_chat_usage_without_details_reads_as_zero_cached() -> None:
    assert usage_from_chat({"prompt_tokens": 3, "completion_tokens": 2}) == {
        "input_tokens": 3, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 2,
        "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 5}  # fmt: skip
