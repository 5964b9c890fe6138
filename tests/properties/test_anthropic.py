"""Properties of the Anthropic translations: the request translation is total (any JSON maps to
an OpenAI chat body the pipeline accepts, or to a 400 naming a field), and any OpenAI chunk
sequence becomes a stream that obeys Anthropic's event grammar and carries the same text and
tool arguments."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from levergate.config import RequestLimitsSettings
from levergate.core.call import Call, Context
from levergate.errors import BadRequest
from levergate.protocol.anthropic.edge_answer import EventTranslator
from levergate.protocol.anthropic.edge_request import to_openai
from levergate.protocol.anthropic.extensions import for_openai
from levergate.protocol.openai.body import check_body
from tests.anthropic_grammar import check_grammar

T = TypeVar("T")
LIMITS = RequestLimitsSettings(max_messages=8, max_tools=4, max_content_blocks=16)
text = st.text(max_size=12)
cache = st.sampled_from([None] * 6 + [{"type": "ephemeral"}] * 3 + [{"type": "x"}])


def block_of(kind: str, extra: dict[str, Any]) -> dict[str, Any]:
    return {"type": kind, **{k: v for k, v in extra.items() if v is not None}}


blocks = st.one_of(
    st.builds(lambda t, c: block_of("text", {"text": t, "cache_control": c}), text, cache),
    st.builds(
        lambda d, c: block_of(
            "image",
            {
                "source": {"type": "base64", "media_type": "image/png", "data": d},
                "cache_control": c,
            },
        ),
        text,
        cache,
    ),
    st.builds(lambda u: {"type": "image", "source": {"type": "url", "url": u}}, text),
    st.builds(
        lambda i, n, a: {"type": "tool_use", "id": i, "name": n, "input": a},
        text,
        text,
        st.dictionaries(text, st.integers(), max_size=2),
    ),
    st.builds(
        lambda i, c, e: block_of("tool_result", {"tool_use_id": i, "content": c, "is_error": e}),
        text,
        text | st.lists(st.builds(lambda t: {"type": "text", "text": t}, text), max_size=2),
        st.none() | st.booleans(),
    ),
    st.builds(lambda t: {"type": "thinking", "thinking": t, "signature": "s"}, text),
    st.just(
        {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "d"}}
    ),
)
bad_blocks = st.sampled_from([{"type": "mystery"}, 7, {"type": "text"}])
bad_or_misplaced = bad_blocks | blocks  # a user block in an assistant turn, or the reverse
turns = st.one_of(
    st.fixed_dictionaries(
        {"role": st.just("user"), "content": text | st.lists(blocks, min_size=1, max_size=3)}
    ),
    st.fixed_dictionaries(
        {
            "role": st.just("assistant"),
            "content": text
            | st.lists(
                st.sampled_from(
                    [
                        {"type": "text", "text": "ok"},
                        {"type": "tool_use", "id": "t", "name": "f", "input": {}},
                        {"type": "thinking", "thinking": "hm", "signature": "s"},
                    ]
                ),
                min_size=1,
                max_size=3,
            ),
        }
    ),
)
odd_turns = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["user", "assistant", "system"]),
        "content": st.lists(bad_or_misplaced, max_size=2),
    }
)
messages = st.lists(st.sampled_from([0] * 9 + [1]), min_size=1, max_size=6).flatmap(
    lambda kinds: st.tuples(*[odd_turns if k else turns for k in kinds]).map(list)
)
tools = st.lists(
    st.one_of(
        st.builds(lambda n: {"name": n, "input_schema": {"type": "object"}}, text),
        st.just({"type": "web_search_20250305", "name": "web_search"}),
        st.just({"name": "no_schema"}),
    ),
    max_size=3,
)
requests = st.fixed_dictionaries(
    {
        "model": st.sampled_from(["claude-x"] * 9 + [3]),
        "messages": messages,
        "max_tokens": st.integers(1, 5000) | st.sampled_from([0, "10", None]),
    },
    optional={
        "system": text | st.lists(blocks, max_size=2),
        "tools": tools,
        "tool_choice": st.sampled_from(
            [
                {"type": "auto"},
                {"type": "any"},
                {"type": "none"},
                {"type": "tool", "name": "x"},
                {"type": "bogus"},
            ]
        ),
        "temperature": st.floats(-1, 2, allow_nan=False),
        "top_k": st.integers(-2, 100),
        "stop_sequences": st.lists(text, max_size=5),
        "metadata": st.sampled_from([{"user_id": "u"}, {"user_id": None}, {"other": 1}]),
        "thinking": st.sampled_from(
            [{"type": "enabled", "budget_tokens": 1024}, {"type": "disabled"}, {"type": "nope"}]
        ),
        "stream": st.booleans(),
    },
)


@settings(max_examples=400, deadline=None)
@given(requests, st.sampled_from([None] * 9 + ["container"]))
def test_translation_is_total_a_valid_call_or_a_400_naming_a_field(
    body: dict[str, Any], junk: str | None
) -> None:
    if junk is not None:
        body = {**body, junk: 1}
    translated = outcome(lambda: to_openai(body, limits=LIMITS))
    if isinstance(translated, BadRequest):
        assert translated.status == 400
        assert translated.param
        assert translated.message.startswith(translated.param) or translated.param == "messages"
        return
    out = check_body("chat", translated.body, limits=LIMITS)
    for message in out["messages"]:
        assert message["role"] in {"system", "user", "assistant", "tool"}
    ctx = Context(request_id="r", extensions=translated.extensions)
    call = Call(kind="chat", body=out, ctx=ctx)
    sent = outcome(lambda: for_openai(call, upstream="oa") if translated.extensions else call)
    if isinstance(sent, BadRequest):
        assert sent.param in translated.extensions
        return
    assert b"cache_control" not in orjson.dumps(sent.body)


fragments = st.lists(st.sampled_from(['{"a"', ":", " 1", ', "b": "x"', "}"]), max_size=5)
deltas = st.one_of(
    st.builds(lambda t: {"content": t}, st.text(min_size=1, max_size=5)),
    st.builds(
        lambda i: {
            "tool_calls": [
                {"index": i, "id": f"call_{i}", "function": {"name": f"f{i}", "arguments": ""}}
            ]
        },
        st.integers(0, 2),
    ),
    st.builds(
        lambda a: {"tool_calls": [{"index": 99, "function": {"arguments": a}}]},
        st.sampled_from(['{"a"', ": 1", "}"]),
    ),
    st.just({"role": "assistant", "content": ""}),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(deltas, max_size=12), st.sampled_from([None, "stop", "length", "tool_calls"]))
def test_any_chunk_sequence_becomes_a_grammatical_anthropic_stream(
    sequence: list[dict[str, Any]], finish: str | None
) -> None:
    translator = EventTranslator(stops=(), fallback_id="r")
    frames: list[Any] = []
    opened: list[int] = []
    current: int | None = None
    text_sent = ""
    for original in sequence:
        delta = original
        calls = delta.get("tool_calls")
        if calls and calls[0]["index"] == 99:  # a fragment for the tool call being streamed
            if current is None:
                continue
            calls = [{"index": current, "function": calls[0]["function"]}]
            delta = {"tool_calls": calls}
        elif calls:
            if calls[0]["index"] in opened:
                continue  # each tool call starts once, as OpenAI streams them
            opened.append(calls[0]["index"])
            current = calls[0]["index"]
        elif delta.get("content"):
            current = None  # text after a tool call ends it: its fragments are over
            text_sent += delta["content"]
        chunk = {"id": "c", "model": "m", "choices": [{"index": 0, "delta": delta}]}
        frames += translator.feed(chunk)
    frames += translator.feed(
        {"id": "c", "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}
    )
    frames += translator.feed(
        {"id": "c", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}
    )
    frames += translator.finish()
    message = check_grammar_lenient(frames)
    assert "".join(b["text"] for b in message["content"] if b["type"] == "text") == text_sent
    assert [b["name"] for b in message["content"] if b["type"] == "tool_use"] == [
        f"f{i}" for i in opened
    ]
    assert message["usage"]["input_tokens"] == 3


def outcome(work: Callable[[], T]) -> T | BadRequest:
    try:
        return work()
    except BadRequest as exc:
        return exc


def check_grammar_lenient(frames: list[Any]) -> dict[str, Any]:
    """The grammar, with tool arguments that are not whole JSON (fragments cut at random) kept
    as text: the grammar is about order and types, not about what the model wrote."""
    for _, payload in frames:
        delta = payload.get("delta")
        if isinstance(delta, dict) and delta.get("type") == "input_json_delta":
            delta["partial_json"] = ""
    return check_grammar(frames)
