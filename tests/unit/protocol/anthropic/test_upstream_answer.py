"""Golden tests: Anthropic answers -> OpenAI shapes (protocol/anthropic/upstream_answer.py and
anthropic/upstream_stream.py). Payloads are in the shapes of Anthropic's Messages API reference, its
tool-use guide (`msg_01Aq9w938a90dw8q`, the `get_weather` call) and its streaming page (the
"streaming request with tool use" example: a text block, then a tool_use block whose input
arrives as `input_json_delta` fragments, usage in `message_start` and `message_delta`)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from levergate.core.quota import Quota
from levergate.policies.pricing import from_usage
from levergate.protocol.anthropic.upstream_answer import (
    anthropic_quota,
    chat_completion,
    openai_usage,
)
from levergate.protocol.anthropic.upstream_stream import StreamError, StreamTranslator

TOOL_USE_MESSAGE = {
    "id": "msg_01Aq9w938a90dw8q",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5",
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "content": [
        {"type": "text", "text": "I'll check the current weather in San Francisco for you."},
        {
            "type": "tool_use",
            "id": "toolu_01A09q90qw90lq917835lq9",
            "name": "get_weather",
            "input": {"location": "San Francisco, CA", "unit": "celsius"},
        },
    ],
    "usage": {
        "input_tokens": 472,
        "output_tokens": 89,
        "cache_creation_input_tokens": 100,
        "cache_read_input_tokens": 2000,
        "cache_creation": {"ephemeral_5m_input_tokens": 60, "ephemeral_1h_input_tokens": 40},
    },
}


def test_tool_use_message_becomes_a_tool_call_completion() -> None:
    out = chat_completion(TOOL_USE_MESSAGE, created=1_700_000_000)
    assert out == {
        "id": "msg_01Aq9w938a90dw8q",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "claude-sonnet-4-5",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "I'll check the current weather in San Francisco for you.",
                    "tool_calls": [
                        {
                            "id": "toolu_01A09q90qw90lq917835lq9",
                            "type": "function",
                            "function": {
                                "name": "get_weather",
                                "arguments": '{"location":"San Francisco, CA","unit":"celsius"}',
                            },
                        }
                    ],
                },
                "logprobs": None,
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {
            "prompt_tokens": 2572,
            "completion_tokens": 89,
            "total_tokens": 2661,
            "prompt_tokens_details": {"cached_tokens": 2000},
            "cache_read_input_tokens": 2000,
            "cache_creation_input_tokens": 100,
            "cache_creation": {"ephemeral_5m_input_tokens": 60, "ephemeral_1h_input_tokens": 40},
        },
    }
    # What the ledger reads: 2,572 = 472 uncached + 2,000 read + 100 written (40 of them 1h).
    t = from_usage(out["usage"])
    assert (t.input_uncached, t.cached_read, t.cache_write, t.cache_write_1h) == (
        472,
        2000,
        100,
        40,
    )
    assert (t.input, t.output) == (2572, 89)


@pytest.mark.parametrize(
    ("stop", "finish"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("max_tokens", "length"),
        ("tool_use", "tool_calls"),
        ("refusal", "content_filter"),
    ],
)
def test_stop_reasons(stop: str, finish: str) -> None:
    message = {**TOOL_USE_MESSAGE, "stop_reason": stop, "content": [{"type": "text", "text": "x"}]}
    assert chat_completion(message, created=0)["choices"][0]["finish_reason"] == finish


def test_usage_without_cache_fields_adds_none_of_them() -> None:
    assert openai_usage({"input_tokens": 10, "output_tokens": 3}) == {
        "prompt_tokens": 10,
        "completion_tokens": 3,
        "total_tokens": 13,
        "prompt_tokens_details": {"cached_tokens": 0},
    }


def sse(kind: str, data: dict[str, Any]) -> dict[str, Any]:
    return {"type": kind, **data}


# The streaming page's tool-use example, as the decoded `data` of each event.
TWO_BLOCK_STREAM = [
    sse(
        "message_start",
        {
            "message": {
                "id": "msg_014p7gG3wDgGV9EUtLvnow3U",
                "type": "message",
                "role": "assistant",
                "model": "claude-opus-4-6",
                "stop_sequence": None,
                "usage": {
                    "input_tokens": 472,
                    "output_tokens": 2,
                    "cache_creation_input_tokens": 0,
                    "cache_read_input_tokens": 1024,
                },
                "content": [],
                "stop_reason": None,
            }
        },
    ),
    sse("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
    sse("ping", {}),
    sse("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": "Okay"}}),
    sse(
        "content_block_delta",
        {"index": 0, "delta": {"type": "text_delta", "text": ", let's check"}},
    ),
    sse("content_block_stop", {"index": 0}),
    sse(
        "content_block_start",
        {
            "index": 1,
            "content_block": {
                "type": "tool_use",
                "id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6",
                "name": "get_weather",
                "input": {},
            },
        },
    ),
    sse(
        "content_block_delta",
        {"index": 1, "delta": {"type": "input_json_delta", "partial_json": ""}},
    ),
    sse(
        "content_block_delta",
        {"index": 1, "delta": {"type": "input_json_delta", "partial_json": '{"location":'}},
    ),
    sse(
        "content_block_delta",
        {
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": ' "San Francisco, CA"}'},
        },
    ),
    sse("content_block_stop", {"index": 1}),
    sse(
        "message_delta",
        {
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {"output_tokens": 89},
        },
    ),
    sse("message_stop", {}),
]


def test_a_stream_with_text_and_tool_use_blocks() -> None:
    translator = StreamTranslator(created=5, model="asked-model")
    chunks = [chunk for event in TWO_BLOCK_STREAM for chunk in translator.feed(event)]
    assert translator.done
    assert all(c["id"] == "msg_014p7gG3wDgGV9EUtLvnow3U" for c in chunks)
    assert all(c["model"] == "claude-opus-4-6" and c["created"] == 5 for c in chunks)
    deltas = [c["choices"][0]["delta"] if c["choices"] else None for c in chunks]
    assert deltas == [
        {"role": "assistant", "content": ""},
        {"content": "Okay"},
        {"content": ", let's check"},
        {
            "tool_calls": [
                {
                    "index": 0,
                    "id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": ""},
                }
            ]
        },
        {"tool_calls": [{"index": 0, "function": {"arguments": ""}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": '{"location":'}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": ' "San Francisco, CA"}'}}]},
        {},
        None,
    ]
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"
    arguments = "".join(
        call["function"]["arguments"] for d in deltas if d for call in d.get("tool_calls", [])
    )
    assert orjson.loads(arguments) == {"location": "San Francisco, CA"}
    assert chunks[-1]["usage"] == {
        "prompt_tokens": 472 + 1024,
        "completion_tokens": 89,
        "total_tokens": 472 + 1024 + 89,
        "prompt_tokens_details": {"cached_tokens": 1024},
        "cache_read_input_tokens": 1024,
        "cache_creation_input_tokens": 0,
    }


def test_an_error_event_raises_with_its_error() -> None:
    translator = StreamTranslator(created=0, model="m")
    translator.feed(TWO_BLOCK_STREAM[0])
    with pytest.raises(StreamError) as caught:
        translator.feed(
            sse("error", {"error": {"type": "overloaded_error", "message": "Overloaded"}})
        )
    assert caught.value.error["type"] == "overloaded_error"


def test_ratelimit_headers_become_a_quota() -> None:
    now = 1_764_610_000.0  # 2025-12-01T17:26:40Z
    headers = {
        "anthropic-ratelimit-requests-limit": "50",
        "anthropic-ratelimit-requests-remaining": "0",
        "anthropic-ratelimit-requests-reset": "2025-12-01T17:27:00Z",
        "anthropic-ratelimit-input-tokens-limit": "30000",
        "anthropic-ratelimit-input-tokens-remaining": "29000",
        "anthropic-ratelimit-output-tokens-limit": "8000",
        "anthropic-ratelimit-output-tokens-remaining": "800",
        "anthropic-ratelimit-output-tokens-reset": "2025-12-01T17:26:50+00:00",
    }
    quota = anthropic_quota(headers, now=now)
    assert isinstance(quota, Quota)
    assert quota.requests.exhausted
    assert quota.requests.reset_seconds == 20.0
    # The tightest token dimension stands for tokens: output, 10% left.
    assert quota.tokens.limit == 8000
    assert quota.tokens.reset_seconds == 10.0
    assert quota.headroom == 0.0
    assert quota.reset_floor() == 20.0
    assert anthropic_quota({"content-type": "application/json"}, now=now) is None
    odd = anthropic_quota({"anthropic-ratelimit-requests-reset": "soon"}, now=now)
    assert odd is not None
    assert odd.requests.reset_seconds is None
