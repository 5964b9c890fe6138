"""Golden tests: OpenAI chat requests -> Anthropic Messages requests
(anthropic/upstream_request.py).

The expected Anthropic payloads are in the shapes of Anthropic's Messages API reference and its
tool-use guide (the `get_weather` round trip: a `tool_use` block answered by a `tool_result`
in the next user turn)."""

from __future__ import annotations

from typing import Any

import pytest

from levergate.errors import BadRequest
from levergate.protocol.anthropic.upstream_request import to_messages_request

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a given location",
        "parameters": {
            "type": "object",
            "properties": {"location": {"type": "string"}, "unit": {"type": "string"}},
            "required": ["location"],
        },
    },
}


def translate(body: dict[str, Any]) -> dict[str, Any]:
    return to_messages_request({"model": "claude-sonnet-4-5", **body}, default_max_tokens=4096)


def test_system_prompts_are_hoisted_and_max_tokens_defaults() -> None:
    out = translate(
        {
            "messages": [
                {"role": "system", "content": "You are terse."},
                {"role": "user", "content": "Hello"},
            ],
            "temperature": 0.5,
            "top_p": 0.9,
            "stop": "END",
        }
    )
    assert out == {
        "model": "claude-sonnet-4-5",
        "system": "You are terse.",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Hello"}]}],
        "max_tokens": 4096,
        "temperature": 0.5,
        "top_p": 0.9,
        "stop_sequences": ["END"],
    }


def test_max_completion_tokens_wins_and_extensions_pass() -> None:
    out = translate(
        {
            "messages": [
                {
                    "role": "developer",
                    "content": [
                        {"type": "text", "text": "Rules.", "cache_control": {"type": "ephemeral"}}
                    ],
                },
                {"role": "user", "content": "Hi"},
            ],
            "max_tokens": 10,
            "max_completion_tokens": 20,
            "top_k": 5,
            "thinking": {"type": "enabled", "budget_tokens": 1024},
            "metadata": {"user_id": "u-1", "purpose": "tagging"},
            "seed": 7,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    )
    assert out["system"] == [
        {"type": "text", "text": "Rules.", "cache_control": {"type": "ephemeral"}}
    ]
    assert out["max_tokens"] == 20
    assert out["top_k"] == 5
    assert out["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    assert out["metadata"] == {"user_id": "u-1"}
    assert out["stream"] is True
    assert "seed" not in out
    assert "stream_options" not in out


def test_images_become_base64_and_url_sources() -> None:
    out = translate(
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "What is in these?"},
                        {
                            "type": "image_url",
                            "image_url": {
                                "url": "data:image/png;base64,iVBORw0KGgo=",
                                "detail": "low",
                            },
                        },
                        {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
                    ],
                }
            ]
        }
    )
    assert out["messages"][0]["content"] == [
        {"type": "text", "text": "What is in these?"},
        {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
        },
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
    ]


# The Anthropic conversation the tool-use guide shows, as translated from the OpenAI one.
ROUND_TRIP_MESSAGES = [
    {
        "role": "user",
        "content": [{"type": "text", "text": "What's the weather in San Francisco and Paris?"}],
    },
    {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "I'll check both."},
            {
                "type": "tool_use",
                "id": "toolu_01A09q90qw90lq917835lq9",
                "name": "get_weather",
                "input": {"location": "San Francisco, CA"},
            },
            {
                "type": "tool_use",
                "id": "toolu_02",
                "name": "get_weather",
                "input": {"location": "Paris"},
            },
        ],
    },
    {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_01A09q90qw90lq917835lq9",
                "content": "15 C",
            },
            {"type": "tool_result", "tool_use_id": "toolu_02", "content": "18 C"},
            {"type": "text", "text": "Which is warmer?"},
        ],
    },
]


def test_tool_use_round_trip_request() -> None:
    """The tool-use guide's conversation, OpenAI-shaped: the assistant's tool call becomes a
    `tool_use` block, the two tool results (parallel calls) and the user's follow-up one user
    turn, results first."""
    out = translate(
        {
            "messages": [
                {"role": "user", "content": "What's the weather in San Francisco and Paris?"},
                {
                    "role": "assistant",
                    "content": "I'll check both.",
                    "tool_calls": [
                        {
                            "id": "toolu_01A09q90qw90lq917835lq9",
                            "type": "function",
                            "function": {
                                "name": "get_weather",
                                "arguments": '{"location": "San Francisco, CA"}',
                            },
                        },
                        {
                            "id": "toolu_02",
                            "type": "function",
                            "function": {
                                "name": "get_weather",
                                "arguments": '{"location": "Paris"}',
                            },
                        },
                    ],
                },
                {
                    "role": "tool",
                    "tool_call_id": "toolu_01A09q90qw90lq917835lq9",
                    "content": "15 C",
                },
                {"role": "tool", "tool_call_id": "toolu_02", "content": "18 C"},
                {"role": "user", "content": "Which is warmer?"},
            ],
            "tools": [{**WEATHER_TOOL, "cache_control": {"type": "ephemeral"}}],
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
            "parallel_tool_calls": False,
        }
    )
    assert out["tools"] == [
        {
            "name": "get_weather",
            "description": "Get the current weather in a given location",
            "input_schema": WEATHER_TOOL["function"]["parameters"],  # type: ignore[index]
            "cache_control": {"type": "ephemeral"},
        }
    ]
    assert out["tool_choice"] == {
        "type": "tool",
        "name": "get_weather",
        "disable_parallel_tool_use": True,
    }
    assert out["messages"] == ROUND_TRIP_MESSAGES


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("auto", {"type": "auto"}),
        ("none", {"type": "none"}),
        ("required", {"type": "any"}),
    ],
)
def test_tool_choice_words(choice: str, expected: dict[str, Any]) -> None:
    out = translate(
        {
            "messages": [{"role": "user", "content": "x"}],
            "tools": [WEATHER_TOOL],
            "tool_choice": choice,
        }
    )
    assert out["tool_choice"] == expected


def test_json_schema_becomes_output_config() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    out = translate(
        {
            "messages": [{"role": "user", "content": "x"}],
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "s", "schema": schema},
            },
            "reasoning_effort": "low",
        }
    )
    assert out["output_config"] == {
        "format": {"type": "json_schema", "schema": schema},
        "effort": "low",
    }


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"n": 2}, "n"),
        ({"logprobs": True}, "logprobs"),
        ({"top_logprobs": 3}, "top_logprobs"),
        ({"frequency_penalty": 0.5}, "frequency_penalty"),
        ({"presence_penalty": 1}, "presence_penalty"),
        ({"logit_bias": {"1": 2}}, "logit_bias"),
        ({"modalities": ["text", "audio"]}, "modalities"),
        ({"audio": {"voice": "alloy"}}, "audio"),
        ({"response_format": {"type": "json_object"}}, "response_format"),
        ({"temperature": 1.5}, "temperature"),
        ({"reasoning_effort": "minimal"}, "reasoning_effort"),
        ({"functions": [{"name": "f"}]}, "functions"),
        ({"some_future_field": 1}, "some_future_field"),
        ({"tools": [{"type": "code_interpreter"}]}, "tools[0]"),
    ],
)
def test_what_anthropic_cannot_express_is_a_400_naming_it(
    extra: dict[str, Any], param: str
) -> None:
    with pytest.raises(BadRequest) as caught:
        translate({"messages": [{"role": "user", "content": "x"}], **extra})
    assert caught.value.param == param
    assert param in caught.value.message


def test_neutral_values_of_refused_fields_pass() -> None:
    out = translate(
        {
            "messages": [{"role": "user", "content": "x"}],
            "n": 1,
            "logprobs": False,
            "frequency_penalty": 0,
            "presence_penalty": 0.0,
            "logit_bias": {},
            "user": "end-user-7",
        }
    )
    assert out["metadata"] == {"user_id": "end-user-7"}


@pytest.mark.parametrize(
    ("message", "param"),
    [
        (
            {"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]},
            "messages[0].content[0]",
        ),
        (
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "ftp://x"}}]},
            "messages[0].content[0]",
        ),
        ({"role": "function", "name": "f", "content": "x"}, "messages[0].role"),
        ({"role": "tool", "content": "x"}, "messages[0]"),
    ],
)
def test_bad_messages_name_where(message: dict[str, Any], param: str) -> None:
    with pytest.raises(BadRequest) as caught:
        translate({"messages": [message]})
    assert caught.value.param == param


def test_tool_call_arguments_must_be_a_json_object() -> None:
    call = {"id": "t1", "type": "function", "function": {"name": "f", "arguments": "[1, 2]"}}
    with pytest.raises(BadRequest) as caught:
        translate({"messages": [{"role": "assistant", "content": None, "tool_calls": [call]}]})
    assert caught.value.param == "messages[0].tool_calls[0]"


def test_top_level_cache_control_and_tool_errors_are_carried() -> None:
    out = translate(
        {
            "messages": [
                {"role": "user", "content": "x"},
                {"role": "tool", "tool_call_id": "t1", "content": "boom", "is_error": True},
            ],
            "cache_control": {"type": "ephemeral", "ttl": "1h"},
        }
    )
    assert out["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert out["messages"][1]["content"] == [
        {"type": "tool_result", "tool_use_id": "t1", "content": "boom", "is_error": True}
    ]


def test_the_anthropic_sdks_output_config_cache_control_and_speed_reach_anthropic() -> None:
    """An Anthropic client's request crosses the OpenAI-shaped pipeline and comes out as it was
    sent: output_config (format and effort), the top-level breakpoint and fast mode."""
    from levergate.config import RequestLimitsSettings
    from levergate.protocol.anthropic.edge_request import to_openai

    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    sent = {
        "model": "claude",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Pick a number."}]}],
        "output_config": {"format": {"type": "json_schema", "schema": schema}, "effort": "max"},
        "cache_control": {"type": "ephemeral"},
        "speed": "fast",
    }
    body = to_openai(sent, limits=RequestLimitsSettings()).body
    assert to_messages_request(body, default_max_tokens=1) == sent
