"""Golden translations of OpenAI answers into Anthropic messages and event streams. The expected
shapes follow Anthropic's documented examples (the get_weather tool use, and the streaming
example with a text block then a tool_use block fed by input_json_delta fragments)."""

from __future__ import annotations

from typing import Any

import anthropic
import pytest

from levergate.errors import UpstreamUnavailable
from levergate.protocol.anthropic.edge_answer import (
    EventTranslator,
    events_of,
    stop_of,
    to_message,
    usage_of,
)
from tests.anthropic_grammar import check_grammar

TEXT = "Okay, let's check the weather for San Francisco, CA:"
ARGUMENTS = ['{"location":', ' "San Fra', 'ncisco, CA"', ', "unit": "fahrenheit"}']
TOOL_ID = "toolu_01T1x1fJ34qAmk2tNTrN7Up6"


def completion(message: dict[str, Any], finish: str, usage: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "chatcmpl-abc123",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-4o",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": usage,
    }


def test_a_tool_call_answer_is_the_documented_tool_use_message() -> None:
    data = completion(
        {
            "role": "assistant",
            "content": TEXT,
            "tool_calls": [
                {
                    "id": TOOL_ID,
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": "".join(ARGUMENTS)},
                }
            ],
        },
        "tool_calls",
        {"prompt_tokens": 472, "completion_tokens": 89, "total_tokens": 561},
    )
    message = to_message(data, stops=(), fallback_id="r")
    assert message == {
        "id": "msg_abc123",
        "type": "message",
        "role": "assistant",
        "model": "gpt-4o",
        "content": [
            {"type": "text", "text": TEXT},
            {
                "type": "tool_use",
                "id": TOOL_ID,
                "name": "get_weather",
                "input": {"location": "San Francisco, CA", "unit": "fahrenheit"},
            },
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 472,
            "output_tokens": 89,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }
    anthropic.types.Message.model_validate(message)  # the SDK's own type accepts it


def test_usage_excludes_cached_reads_and_writes_from_input_tokens() -> None:
    # OpenAI: cached_tokens counted inside prompt_tokens.
    openai_usage = {
        "prompt_tokens": 2006,
        "completion_tokens": 300,
        "prompt_tokens_details": {"cached_tokens": 1920},
    }
    assert usage_of(openai_usage) == {
        "input_tokens": 86,
        "output_tokens": 300,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 1920,
    }
    # An Anthropic upstream's translated usage: both buckets at the top level win.
    translated = {
        "prompt_tokens": 3000,
        "completion_tokens": 5,
        "prompt_tokens_details": {"cached_tokens": 1000},
        "cache_read_input_tokens": 1000,
        "cache_creation_input_tokens": 1500,
    }
    assert usage_of(translated)["input_tokens"] == 500
    assert usage_of(translated)["cache_creation_input_tokens"] == 1500
    assert usage_of(None) == {
        "input_tokens": 0,
        "output_tokens": 0,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


@pytest.mark.parametrize(
    ("choice", "stops", "expected"),
    [
        ({"finish_reason": "stop"}, (), ("end_turn", None)),
        ({"finish_reason": "length"}, (), ("max_tokens", None)),
        ({"finish_reason": "tool_calls"}, (), ("tool_use", None)),
        ({"finish_reason": "content_filter"}, (), ("refusal", None)),
        ({"finish_reason": "stop", "stop_reason": "END"}, ("END",), ("stop_sequence", "END")),
        ({"finish_reason": "stop", "stop_reason": 128009}, ("END",), ("end_turn", None)),
        ({"finish_reason": "stop_sequence", "stop_sequence": "X"}, ("X",), ("stop_sequence", "X")),
        ({"finish_reason": "pause_turn"}, (), ("pause_turn", None)),
        ({}, (), ("end_turn", None)),
    ],
)
def test_stop_reasons(choice: dict[str, Any], stops: tuple[str, ...], expected: Any) -> None:
    assert stop_of(choice, stops) == expected


def test_tool_arguments_that_are_not_an_object_are_a_502_not_a_silent_empty_input() -> None:
    data = completion(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{broken"}}
            ],
        },
        "tool_calls",
        {},
    )
    with pytest.raises(UpstreamUnavailable, match="'f'"):
        to_message(data, stops=(), fallback_id="r")


def chunk(
    delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any
) -> dict[str, Any]:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return {
        "id": "chatcmpl-9",
        "object": "chat.completion.chunk",
        "model": "gpt-4o",
        "choices": choices,
        **extra,
    }


def openai_stream_with_text_then_a_tool_call() -> list[dict[str, Any]]:
    first = {
        "index": 0,
        "id": TOOL_ID,
        "type": "function",
        "function": {"name": "get_weather", "arguments": ""},
    }
    return [
        chunk({"role": "assistant", "content": ""}),
        chunk({"content": "Okay, let's check"}),
        chunk({"content": " the weather for San Francisco, CA:"}),
        chunk({"tool_calls": [first]}),
        *[chunk({"tool_calls": [{"index": 0, "function": {"arguments": a}}]}) for a in ARGUMENTS],
        chunk({}, finish="tool_calls"),
        chunk(usage={"prompt_tokens": 472, "completion_tokens": 89, "total_tokens": 561}),
    ]


def translate(chunks: list[dict[str, Any]], stops: tuple[str, ...] = ()) -> list[Any]:
    translator = EventTranslator(stops=stops, fallback_id="r")
    frames = [f for c in chunks for f in translator.feed(c)]
    return frames + translator.finish()


TEXT_THEN_TOOL_EVENTS = [
    "message_start",
    "ping",
    "content_block_start",
    "content_block_delta",
    "content_block_delta",
    "content_block_stop",
    "content_block_start",
    *["content_block_delta"] * 4,
    "content_block_stop",
    "message_delta",
    "message_stop",
]


def test_a_stream_with_two_content_blocks_is_the_documented_event_sequence() -> None:
    frames = translate(openai_stream_with_text_then_a_tool_call())
    assert [name for name, _ in frames] == TEXT_THEN_TOOL_EVENTS
    assert frames[0][1]["message"] == {
        "id": "msg_9",
        "type": "message",
        "role": "assistant",
        "model": "gpt-4o",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {
            "input_tokens": 0,
            "output_tokens": 0,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }
    assert frames[2][1] == {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "text", "text": ""},
    }
    assert frames[6][1] == {
        "type": "content_block_start",
        "index": 1,
        "content_block": {"type": "tool_use", "id": TOOL_ID, "name": "get_weather", "input": {}},
    }
    assert frames[7][1] == {
        "type": "content_block_delta",
        "index": 1,
        "delta": {"type": "input_json_delta", "partial_json": '{"location":'},
    }
    assert frames[-2][1] == {
        "type": "message_delta",
        "delta": {"stop_reason": "tool_use", "stop_sequence": None},
        "usage": {
            "input_tokens": 472,
            "output_tokens": 89,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }
    built = check_grammar(frames)
    assert built["content"] == [
        {"type": "text", "text": TEXT},
        {
            "type": "tool_use",
            "id": TOOL_ID,
            "name": "get_weather",
            "input": {"location": "San Francisco, CA", "unit": "fahrenheit"},
        },
    ]


def test_a_whole_answer_replayed_as_a_stream_builds_the_same_message() -> None:
    data = completion(
        {
            "role": "assistant",
            "content": TEXT,
            "tool_calls": [
                {
                    "id": TOOL_ID,
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": "".join(ARGUMENTS)},
                }
            ],
        },
        "tool_calls",
        {"prompt_tokens": 10, "completion_tokens": 3},
    )
    message = to_message(data, stops=(), fallback_id="r")
    assert check_grammar(events_of(message)) == message


def test_an_empty_stream_still_has_a_start_and_an_end() -> None:
    frames = translate([])
    assert [name for name, _ in frames] == [
        "message_start",
        "ping",
        "message_delta",
        "message_stop",
    ]
    assert frames[0][1]["message"]["id"] == "msg_r"


def test_interleaved_tool_call_fragments_are_refused() -> None:
    calls = [
        chunk({"tool_calls": [{"index": 0, "id": "a", "function": {"name": "f"}}]}),
        chunk({"tool_calls": [{"index": 1, "id": "b", "function": {"name": "g"}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}),
    ]
    with pytest.raises(UpstreamUnavailable, match="interleaved"):
        translate(calls)
