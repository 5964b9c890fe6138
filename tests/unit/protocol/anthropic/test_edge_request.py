"""Golden translations of Anthropic Messages requests, with payloads shaped as in Anthropic's
documentation (https://docs.anthropic.com/en/docs/agents-and-tools/tool-use/implement-tool-use,
.../build-with-claude/prompt-caching, .../build-with-claude/vision)."""

from __future__ import annotations

from typing import Any

import pytest

from levergate.config import RequestLimitsSettings
from levergate.errors import BadRequest
from levergate.protocol.anthropic.edge_request import to_openai
from levergate.protocol.openai.body import check_body

LIMITS = RequestLimitsSettings()
WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Get the current weather in a given location",
    "input_schema": {
        "type": "object",
        "properties": {
            "location": {
                "type": "string",
                "description": "The city and state, e.g. San Francisco, CA",
            }
        },
        "required": ["location"],
    },
}
TOOL_USE_ID = "toolu_01A09q90qw90lq917835lq9"
ERROR_TEXT = "ConnectionError: the weather service API is not available (HTTP 500)"
# The documentation's tool-use round trip: question, the model's tool_use, the tool's result.
ROUND_TRIP: dict[str, Any] = {
    "model": "claude-opus-4-1-20250805",
    "max_tokens": 1024,
    "tools": [WEATHER_TOOL],
    "messages": [
        {"role": "user", "content": "What is the weather like in San Francisco?"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "<thinking>I need to use get_weather.</thinking>"},
                {
                    "type": "tool_use",
                    "id": TOOL_USE_ID,
                    "name": "get_weather",
                    "input": {"location": "San Francisco, CA", "unit": "celsius"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": TOOL_USE_ID, "content": "15 degrees"}
            ],
        },
    ],
}


def test_the_documented_tool_use_round_trip_becomes_openai_tool_calls_and_a_tool_message() -> None:
    translated = to_openai(ROUND_TRIP, limits=LIMITS)
    assert translated.extensions == frozenset()
    assert translated.body == {
        "model": "claude-opus-4-1-20250805",
        "max_tokens": 1024,
        "messages": [
            {"role": "user", "content": "What is the weather like in San Francisco?"},
            {
                "role": "assistant",
                "content": "<thinking>I need to use get_weather.</thinking>",
                "tool_calls": [
                    {
                        "id": TOOL_USE_ID,
                        "type": "function",
                        "function": {
                            "name": "get_weather",
                            "arguments": '{"location":"San Francisco, CA","unit":"celsius"}',
                        },
                    }
                ],
            },
            {"role": "tool", "tool_call_id": TOOL_USE_ID, "content": "15 degrees"},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": "Get the current weather in a given location",
                    "parameters": WEATHER_TOOL["input_schema"],
                },
            }
        ],
    }
    # What the edge hands the pipeline passes its own checks unchanged.
    assert check_body("chat", translated.body, limits=LIMITS) == translated.body


def test_prompt_caching_breakpoints_ride_on_system_parts_tools_and_content_parts() -> None:
    cached = {"type": "ephemeral"}
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 1024,
        "system": [
            {
                "type": "text",
                "text": "You are an AI assistant tasked with analyzing literary works.",
            },
            {
                "type": "text",
                "text": "<the entire contents of Pride and Prejudice>",
                "cache_control": cached,
            },
        ],
        "tools": [{**WEATHER_TOOL, "cache_control": cached}],
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Analyze the major themes.", "cache_control": cached}
                ],
            }
        ],
    }
    translated = to_openai(body, limits=LIMITS)
    # Text parts kept apart (an Anthropic upstream keeps its blocks), marked for joining.
    assert translated.extensions == {"cache_control", "text parts"}
    system, user = translated.body["messages"]
    assert system == {
        "role": "system",
        "content": [
            {
                "type": "text",
                "text": "You are an AI assistant tasked with analyzing literary works.",
            },
            {
                "type": "text",
                "text": "<the entire contents of Pride and Prejudice>",
                "cache_control": cached,
            },
        ],
    }
    assert user["content"] == [
        {"type": "text", "text": "Analyze the major themes.", "cache_control": cached}
    ]
    assert translated.body["tools"][0]["cache_control"] == cached


def test_images_become_image_url_parts_as_data_urls_or_urls() -> None:
    body = {
        "model": "m",
        "max_tokens": 10,
        "messages": [
            {
                "role": "user",
                "content": [
                    {
                        "type": "image",
                        "source": {
                            "type": "base64",
                            "media_type": "image/jpeg",
                            "data": "/9j/4AAQ",
                        },
                    },
                    {
                        "type": "image",
                        "source": {"type": "url", "url": "https://upload.wikimedia.org/a.jpg"},
                    },
                    {"type": "text", "text": "Compare these two images."},
                ],
            }
        ],
    }
    content = to_openai(body, limits=LIMITS).body["messages"][0]["content"]
    assert content == [
        {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,/9j/4AAQ"}},
        {"type": "image_url", "image_url": {"url": "https://upload.wikimedia.org/a.jpg"}},
        {"type": "text", "text": "Compare these two images."},
    ]


def test_tool_results_come_first_with_is_error_and_block_content() -> None:
    body = {
        "model": "m",
        "max_tokens": 10,
        "messages": [
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "a", "name": "f", "input": {}},
                    {"type": "tool_use", "id": "b", "name": "g", "input": {"x": 1}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "a",
                        "content": ERROR_TEXT,
                        "is_error": True,
                    },
                    {
                        "type": "tool_result",
                        "tool_use_id": "b",
                        "content": [
                            {"type": "text", "text": "one"},
                            {"type": "text", "text": "two"},
                        ],
                    },
                    {"type": "text", "text": "What now?"},
                ],
            },
        ],
    }
    translated = to_openai(body, limits=LIMITS)
    assert translated.extensions == {"is_error", "text parts"}
    messages = translated.body["messages"]
    assert messages[1]["content"] == ""  # "" beside tool calls: every server takes it
    assert [c["function"]["arguments"] for c in messages[1]["tool_calls"]] == ["{}", '{"x":1}']
    assert messages[2:] == [
        {
            "role": "tool",
            "tool_call_id": "a",
            "is_error": True,
            "content": ERROR_TEXT,
        },
        {
            "role": "tool",
            "tool_call_id": "b",
            "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}],
        },
        {"role": "user", "content": "What now?"},
    ]


@pytest.mark.parametrize(
    ("choice", "expected", "parallel"),
    [
        ({"type": "auto"}, "auto", None),
        ({"type": "any"}, "required", None),
        ({"type": "none"}, "none", None),
        (
            {"type": "tool", "name": "get_weather"},
            {"type": "function", "function": {"name": "get_weather"}},
            None,
        ),
        ({"type": "auto", "disable_parallel_tool_use": True}, "auto", False),
    ],
)
def test_tool_choice_maps_to_openai(choice: dict[str, Any], expected: Any, parallel: Any) -> None:
    body = {**ROUND_TRIP, "tool_choice": choice}
    out = to_openai(body, limits=LIMITS).body
    assert out["tool_choice"] == expected
    assert out.get("parallel_tool_calls") == parallel


def test_parameters_map_and_anthropic_only_ones_are_recorded() -> None:
    body = {
        "model": "m",
        "max_tokens": 50,
        "messages": [{"role": "user", "content": "hi"}],
        "stop_sequences": ["\n\nHuman:", "END"],
        "temperature": 0.5,
        "top_p": 0.9,
        "top_k": 40,
        "metadata": {"user_id": "13803d75-b4b5-4c3e-b2a2-6f21399b021b"},
        "thinking": {"type": "enabled", "budget_tokens": 10000},
        "stream": True,
        "system": "Respond only in Spanish.",
    }
    translated = to_openai(body, limits=LIMITS)
    assert translated.extensions == {"top_k", "thinking"}
    assert translated.body == {
        "model": "m",
        "max_tokens": 50,
        "messages": [
            {"role": "system", "content": "Respond only in Spanish."},
            {"role": "user", "content": "hi"},
        ],
        "stop": ["\n\nHuman:", "END"],
        "temperature": 0.5,
        "top_p": 0.9,
        "top_k": 40,
        "user": "13803d75-b4b5-4c3e-b2a2-6f21399b021b",
        "thinking": {"type": "enabled", "budget_tokens": 10000},
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def test_blocks_openai_cannot_express_are_carried_verbatim_and_named() -> None:
    document = {
        "type": "document",
        "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0x"},
        "citations": {"enabled": True},
    }
    thinking = {"type": "thinking", "thinking": "Let me think", "signature": "EqQBCgIYAhIM"}
    search = {"type": "web_search_20250305", "name": "web_search", "max_uses": 5}
    body = {
        "model": "m",
        "max_tokens": 10,
        "tools": [search],
        "messages": [
            {"role": "user", "content": [document, {"type": "text", "text": "Summarize."}]},
            {"role": "assistant", "content": [thinking, {"type": "text", "text": "It says."}]},
            {"role": "user", "content": "More."},
        ],
    }
    translated = to_openai(body, limits=LIMITS)
    assert translated.extensions == {"document", "thinking", "tool:web_search_20250305"}
    messages = translated.body["messages"]
    assert messages[0]["content"][0] == document
    assert messages[1]["content"][0] == thinking
    assert translated.body["tools"] == [search]


def test_max_tokens_is_required_except_for_counting() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    with pytest.raises(BadRequest) as caught:
        to_openai(body, limits=LIMITS)
    assert caught.value.param == "max_tokens"
    assert "Field required" in caught.value.message
    assert "max_tokens" not in to_openai(body, limits=LIMITS, counting=True).body


OK_MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    ("change", "param"),
    [
        ({"model": None}, "model"),
        ({"messages": []}, "messages"),
        ({"messages": "hi"}, "messages"),
        ({"messages": [{"role": "system", "content": "x"}]}, "messages.0.role"),
        ({"messages": [{"role": "user"}]}, "messages.0.content"),
        ({"messages": [{"role": "user", "content": []}]}, "messages.0.content"),
        # An empty assistant turn as the only message leaves nothing to send (found by
        # Hypothesis: it reached the chat checks as an empty list and named no field).
        ({"messages": [{"role": "assistant", "content": []}]}, "messages.0.content"),
        (
            {"messages": [{"role": "user", "content": [{"type": "video"}]}]},
            "messages.0.content.0.type",
        ),
        (
            {"messages": [{"role": "user", "content": [{"text": "no type"}]}]},
            "messages.0.content.0.type",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "text", "text": 3}]}]},
            "messages.0.content.0.text",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "a", "colour": 1}]}
                ]
            },
            "messages.0.content.0.colour",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": [{"type": "image", "source": {"type": "ftp"}}]}
                ]
            },
            "messages.0.content.0.source.type",
        ),
        (
            {
                "messages": [
                    {
                        "role": "assistant",
                        "content": [{"type": "tool_use", "id": "a", "name": "f", "input": "x"}],
                    }
                ]
            },
            "messages.0.content.0.input",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "tool_result"}]}]},
            "messages.0.content.0.tool_use_id",
        ),
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_tokens": True}, "max_tokens"),
        ({"max_tokens": "10"}, "max_tokens"),
        ({"temperature": 1.5}, "temperature"),
        ({"top_k": -1}, "top_k"),
        ({"stop_sequences": ["a", "b", "c", "d", "e"]}, "stop_sequences"),
        ({"stop_sequences": [1]}, "stop_sequences.0"),
        ({"metadata": {"tenant": "x"}}, "metadata.tenant"),
        ({"thinking": {"type": "maybe"}}, "thinking.type"),
        ({"service_tier": "standard_only"}, "service_tier"),
        ({"tool_choice": {"type": "any"}}, "tool_choice"),
        ({"tool_choice": {"type": "sometimes"}}, "tool_choice.type"),
        ({"tools": [{"name": "f"}]}, "tools.0.input_schema"),
        ({"tools": [{**WEATHER_TOOL, "input_examples": []}]}, "tools.0.input_examples"),
        ({"system": [{"type": "image"}]}, "system.0.type"),
        ({"mcp_servers": []}, "mcp_servers"),
        ({"container": "c"}, "container"),
        ({"output_config": "json"}, "output_config"),
        ({"output_config": {"effort": "extreme"}}, "output_config.effort"),
        ({"output_config": {"verbosity": "low"}}, "output_config.verbosity"),
        ({"output_config": {"format": {"type": "regex"}}}, "output_config.format.type"),
        ({"output_config": {"format": {"type": "json_schema"}}}, "output_config.format.schema"),
        (
            {"output_config": {"format": {"type": "json_schema", "schema": {}, "name": "x"}}},
            "output_config.format.name",
        ),
        ({"cache_control": {"type": "forever"}}, "cache_control.type"),
        ({"cache_control": "yes"}, "cache_control"),
        ({"speed": "ludicrous"}, "speed"),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": "a", "cache_control": {"type": "forever"}}
                        ],
                    }
                ]
            },
            "messages.0.content.0.cache_control.type",
        ),
    ],
)
def test_bad_requests_are_a_400_naming_the_field(change: dict[str, Any], param: str) -> None:
    body = {"model": "m", "max_tokens": 10, "messages": OK_MESSAGES, **change}
    with pytest.raises(BadRequest) as caught:
        to_openai(body, limits=LIMITS)
    assert caught.value.param == param
    assert caught.value.message.startswith(f"{param}: ")


def test_output_config_becomes_openai_structured_output_and_reasoning_effort() -> None:
    """What `messages.parse(output_format=Model)` sends (anthropic 2.x): the schema in
    `output_config.format`, which OpenAI-compatible upstreams know as a strict json_schema."""
    schema = {"type": "object", "properties": {"city": {"type": "string"}},
              "required": ["city"], "additionalProperties": False}  # fmt: skip
    body = {
        "model": "m",
        "max_tokens": 64,
        "messages": OK_MESSAGES,
        "output_config": {"format": {"type": "json_schema", "schema": schema}, "effort": "high"},
        "cache_control": {"type": "ephemeral", "ttl": "1h"},
        "speed": "fast",
    }
    translated = to_openai(body, limits=LIMITS)
    assert translated.body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "output", "schema": schema, "strict": True},
    }
    assert translated.body["reasoning_effort"] == "high"
    assert translated.body["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert translated.body["speed"] == "fast"
    assert translated.extensions == {"cache_control", "speed"}
    assert check_body("chat", translated.body, limits=LIMITS) == translated.body


def test_counts_are_bounded_by_the_request_limits() -> None:
    limits = RequestLimitsSettings(max_messages=3, max_tools=1, max_content_blocks=4)
    many = [{"role": "user", "content": "x"}] * 4
    with pytest.raises(BadRequest, match="limit of 3"):
        to_openai({"model": "m", "max_tokens": 1, "messages": many}, limits=limits)
    tools = [WEATHER_TOOL, WEATHER_TOOL]
    with pytest.raises(BadRequest, match="at most 1 tools"):
        to_openai(
            {"model": "m", "max_tokens": 1, "messages": OK_MESSAGES, "tools": tools}, limits=limits
        )
    blocks = [{"type": "text", "text": "x"}] * 5
    with pytest.raises(BadRequest, match="4 content blocks"):
        to_openai(
            {"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": blocks}]},
            limits=limits,
        )


def test_tool_results_that_push_the_translation_over_the_message_limit_are_a_400() -> None:
    # Within the limit as sent, over it once each tool result becomes a message of its own
    # (found by Hypothesis: it passed translation and then failed the chat checks unnamed).
    turn = {
        "role": "user",
        "content": [
            {"type": "text", "text": "a"},
            {"type": "tool_result", "tool_use_id": "t", "content": "r"},
        ],
    }
    body = {"model": "m", "max_tokens": 8, "messages": [turn] * 8}
    with pytest.raises(BadRequest) as caught:
        to_openai(body, limits=RequestLimitsSettings(max_messages=8))
    assert caught.value.param == "messages"
