"""What an OpenAI-compatible upstream makes of an Anthropic request's extensions."""

from __future__ import annotations

import pytest

from levergate.config import RequestLimitsSettings
from levergate.core.call import Call, Context
from levergate.errors import BadRequest
from levergate.protocol.anthropic.edge_request import to_openai
from levergate.protocol.anthropic.extensions import for_openai

CACHED = {"type": "ephemeral"}


def call_for(body: dict[str, object]) -> Call:
    translated = to_openai(body, limits=RequestLimitsSettings())
    ctx = Context(request_id="r", extensions=translated.extensions)
    return Call(kind="chat", body=translated.body, ctx=ctx)


def test_hints_are_dropped_everywhere_and_nothing_is_mutated() -> None:
    call = call_for(
        {
            "model": "m",
            "max_tokens": 5,
            "system": [{"type": "text", "text": "sys", "cache_control": CACHED}],
            "tools": [{"name": "f", "input_schema": {"type": "object"}, "cache_control": CACHED}],
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "q", "cache_control": CACHED}],
                },
                {
                    "role": "assistant",
                    "content": [
                        {
                            "type": "tool_use",
                            "id": "a",
                            "name": "f",
                            "input": {},
                            "cache_control": CACHED,
                        }
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "a",
                            "content": "boom",
                            "is_error": True,
                            "cache_control": CACHED,
                        }
                    ],
                },
            ],
        }
    )
    sent = for_openai(call, upstream="oa")
    assert b"cache_control" not in repr(sent.body).encode()
    assert b"is_error" not in repr(sent.body).encode()
    # Without their hints, text-only parts are the plain string every server takes.
    assert sent.body["messages"][0] == {"role": "system", "content": "sys"}
    assert sent.body["messages"][1] == {"role": "user", "content": "q"}
    assert sent.body["messages"][2]["content"] == ""
    assert sent.body["messages"][3] == {"role": "tool", "tool_call_id": "a", "content": "boom"}
    assert "cache_control" in repr(call.body)  # the cache and the record keep the original


def test_what_openai_cannot_express_is_a_400_naming_it() -> None:
    call = call_for(
        {
            "model": "m",
            "max_tokens": 5,
            "thinking": {"type": "enabled", "budget_tokens": 2048},
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "document",
                            "source": {"type": "text", "media_type": "text/plain", "data": "d"},
                        },
                        {"type": "text", "text": "q", "cache_control": CACHED},
                    ],
                }
            ],
        }
    )
    with pytest.raises(BadRequest) as caught:
        for_openai(call, upstream="oa")
    assert caught.value.status == 400
    assert "'oa'" in caught.value.message
    assert "document, thinking" in caught.value.message
    assert caught.value.param == "document"


def test_top_k_alone_passes_on_unchanged() -> None:
    call = call_for(
        {"model": "m", "max_tokens": 5, "top_k": 3, "messages": [{"role": "user", "content": "q"}]}
    )
    assert for_openai(call, upstream="oa") is call


def test_several_text_blocks_are_one_string_for_openai_and_stay_blocks_in_the_call() -> None:
    blocks = [{"type": "text", "text": "Context."}, {"type": "text", "text": "Question?"}]
    call = call_for(
        {
            "model": "m",
            "max_tokens": 5,
            "system": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            "messages": [{"role": "user", "content": blocks}],
        }
    )
    assert call.body["messages"][1]["content"] == blocks  # an Anthropic upstream keeps them
    sent = for_openai(call, upstream="oa")
    assert sent.body["messages"] == [
        {"role": "system", "content": "a\nb"},
        {"role": "user", "content": "Context.\nQuestion?"},
    ]


def test_text_beside_an_image_stays_parts() -> None:
    image = {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}
    call = call_for(
        {
            "model": "m",
            "max_tokens": 5,
            "messages": [
                {
                    "role": "user",
                    "content": [image, {"type": "text", "text": "q", "cache_control": CACHED}],
                }
            ],
        }
    )
    sent = for_openai(call, upstream="oa")
    assert sent.body["messages"][0]["content"] == [
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
        {"type": "text", "text": "q"},
    ]


def test_a_top_level_breakpoint_is_dropped_and_fast_mode_refused() -> None:
    question = [{"role": "user", "content": "q"}]
    call = call_for({"model": "m", "max_tokens": 5, "cache_control": CACHED, "messages": question})
    assert call.body["cache_control"] == CACHED
    sent = for_openai(call, upstream="oa")
    assert sent.body == {"model": "m", "max_tokens": 5, "messages": question}
    fast = call_for({"model": "m", "max_tokens": 5, "speed": "fast", "messages": question})
    with pytest.raises(BadRequest) as caught:
        for_openai(fast, upstream="oa")
    assert caught.value.param == "speed"
    standard = call_for({"model": "m", "max_tokens": 5, "speed": "standard", "messages": question})
    assert "speed" not in standard.body  # the default: nothing to express
    assert for_openai(standard, upstream="oa") is standard
