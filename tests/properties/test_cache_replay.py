"""Properties of the shape conversions: a whole answer cut into chunks adds up to itself."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from levergate.layers.cache.replay import assemble, synthesize, verdict

TEXT = st.text(max_size=40)
TOOL_CALL = st.fixed_dictionaries(
    {
        "id": st.text(min_size=1, max_size=8),
        "type": st.just("function"),
        "function": st.fixed_dictionaries(
            {"name": st.text(min_size=1, max_size=8), "arguments": TEXT}
        ),
    }
)
USAGE = st.fixed_dictionaries(
    {"prompt_tokens": st.integers(0, 999), "completion_tokens": st.integers(0, 999),
     "total_tokens": st.integers(0, 2000)}
)  # fmt: skip


@st.composite
def chat_answers(draw: st.DrawFn) -> dict[str, Any]:
    choices = []
    for index in range(draw(st.integers(1, 3))):
        message: dict[str, Any] = {"role": "assistant", "content": draw(st.none() | TEXT) or None}
        calls = draw(st.lists(TOOL_CALL, max_size=2))
        if calls:
            message["tool_calls"] = calls
        choices.append({
            "index": index,
            "message": message,
            "logprobs": None,
            "finish_reason": draw(st.sampled_from(["stop", "length", "tool_calls"])),
        })  # fmt: skip
    answer: dict[str, Any] = {
        "id": "chatcmpl-1", "created": 7, "model": "m", "object": "chat.completion",
        "choices": choices,
    }  # fmt: skip
    if draw(st.booleans()):
        answer["usage"] = draw(USAGE)
    return answer


@given(chat_answers())
def test_chat_answers_survive_a_round_trip_through_chunks(answer: dict[str, Any]) -> None:
    chunks = synthesize("chat", answer)
    assert all(c.json()["object"] == "chat.completion.chunk" for c in chunks)
    assert assemble("chat", chunks) == answer


@given(st.lists(TEXT, min_size=1, max_size=3), st.none() | USAGE)
def test_completions_survive_a_round_trip_through_chunks(
    texts: list[str], usage: dict[str, int] | None
) -> None:
    answer: dict[str, Any] = {
        "id": "cmpl-1", "created": 7, "model": "m", "object": "text_completion",
        "choices": [{"index": i, "text": t, "logprobs": None, "finish_reason": "stop"}
                    for i, t in enumerate(texts)],
    }  # fmt: skip
    if usage is not None:
        answer["usage"] = usage
    assert assemble("completion", synthesize("completion", answer)) == answer


@given(chat_answers())
def test_tool_calls_are_cacheable_only_when_allowed(answer: dict[str, Any]) -> None:
    calls = any(
        c["message"].get("tool_calls") or c["finish_reason"] == "tool_calls"
        for c in answer["choices"]
    )
    assert (verdict(answer, allow_tools=False) == "tool_calls") == calls
    assert verdict(answer, allow_tools=True) is None
    filtered = {**answer, "choices": [{**answer["choices"][0], "finish_reason": "content_filter"}]}
    assert verdict(filtered, allow_tools=True) == "content_filter"
