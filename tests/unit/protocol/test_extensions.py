"""What an OpenAI-compatible upstream makes of an Anthropic request's extensions."""

from __future__ import annotations

import pytest

from levergate.config import RequestLimits
from levergate.core.call import Call, Context
from levergate.errors import BadRequest
from levergate.protocol.anthropic_in import to_openai
from levergate.protocol.extensions import for_openai

CACHED = {"type": "ephemeral"}


def call_for(body: dict[str, object]) -> Call:
    translated = to_openai(body, limits=RequestLimits())
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
    assert sent.body["messages"][3] == {
        "role": "tool",
        "tool_call_id": "a",
        "content": [{"type": "text", "text": "boom"}],
    }
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
