"""Properties of the OpenAI -> Anthropic request translation
(protocol/anthropic/upstream_request.py).

Round trip: any Anthropic request built from what both wire formats express (alternating
turns of text, images, tool calls and tool results, system blocks with `cache_control`, tools,
stop sequences, sampling) written the OpenAI way (`as_openai`, the plain inverse below) comes
back from the translation exactly as it was. And on the OpenAI side, the translation keeps
every text in order and never produces a role or block order Anthropic refuses."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st

from levergate.protocol.anthropic.upstream_request import to_messages_request

text = st.text(min_size=1, max_size=20)
ident = st.from_regex(r"toolu_[a-z0-9]{4}", fullmatch=True)
cache = st.sampled_from([None, {"type": "ephemeral"}, {"type": "ephemeral", "ttl": "1h"}])


def _with_cache(block: dict[str, Any], marker: dict[str, Any] | None) -> dict[str, Any]:
    return block if marker is None else {**block, "cache_control": marker}


text_block = st.builds(lambda t, c: _with_cache({"type": "text", "text": t}, c), text, cache)
image_block = st.one_of(
    st.builds(
        lambda d: {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": d},
        },
        st.from_regex(r"[A-Za-z0-9+/]{4,12}", fullmatch=True),
    ),
    st.builds(
        lambda p: {"type": "image", "source": {"type": "url", "url": f"https://example.com/{p}"}},
        st.from_regex(r"[a-z]{1,8}\.png", fullmatch=True),
    ),
)
tool_result = st.builds(
    lambda i, c: {"type": "tool_result", "tool_use_id": i, "content": c}, ident, text
)
tool_use = st.builds(
    lambda i, n, a: {"type": "tool_use", "id": i, "name": n, "input": a},
    ident,
    st.sampled_from(["get_weather", "lookup"]),
    st.dictionaries(
        st.sampled_from(["a", "b", "city"]),
        st.integers(min_value=-(2**53), max_value=2**53) | text,
        max_size=3,
    ),
)
user_turn = st.one_of(
    st.lists(st.one_of(text_block, image_block), min_size=1, max_size=3),
    st.builds(
        lambda r, t: r + t,
        st.lists(tool_result, min_size=1, max_size=3),
        st.lists(text_block, max_size=2),
    ),
)
assistant_turn = st.builds(
    lambda t, u: t + u,
    st.lists(text_block, max_size=2),
    st.lists(tool_use, max_size=2),
).filter(bool)


@st.composite
def anthropic_requests(draw: st.DrawFn) -> dict[str, Any]:
    turns = draw(st.integers(min_value=1, max_value=6))
    messages = [
        {
            "role": "user" if i % 2 == 0 else "assistant",
            "content": draw(user_turn if i % 2 == 0 else assistant_turn),
        }
        for i in range(turns)
    ]
    request: dict[str, Any] = {"model": "claude-x", "messages": messages}
    system = draw(st.one_of(st.none(), text, st.lists(text_block, min_size=1, max_size=2)))
    if system is not None and not (
        isinstance(system, list) and len(system) == 1 and "cache_control" not in system[0]
    ):
        request["system"] = system
    request["max_tokens"] = draw(st.integers(min_value=1, max_value=8192))
    if draw(st.booleans()):
        request["temperature"] = draw(st.floats(min_value=0, max_value=1))
    if draw(st.booleans()):
        request["stop_sequences"] = draw(st.lists(text, min_size=1, max_size=3))
    if draw(st.booleans()):
        request["tools"] = [
            _with_cache(
                {
                    "name": n,
                    "description": "d",
                    "input_schema": {"type": "object", "properties": {}},
                },
                draw(cache),
            )
            for n in draw(
                st.lists(
                    st.sampled_from(["get_weather", "lookup"]), min_size=1, max_size=2, unique=True
                )
            )
        ]
        request["tool_choice"] = draw(
            st.sampled_from(
                [
                    {"type": "auto"},
                    {"type": "any"},
                    {"type": "none"},
                    {"type": "tool", "name": "lookup"},
                ]
            )
        )
    return request


def as_openai(request: dict[str, Any]) -> dict[str, Any]:
    """The plain inverse: how an OpenAI client says the same request."""
    messages: list[dict[str, Any]] = []
    system = request.get("system")
    if isinstance(system, str):
        messages.append({"role": "system", "content": system})
    elif system:
        messages.append({"role": "system", "content": [_part(b) for b in system]})
    for turn in request["messages"]:
        messages.extend(_turn(turn))
    body: dict[str, Any] = {
        "model": request["model"],
        "messages": messages,
        "max_tokens": request["max_tokens"],
    }
    if "temperature" in request:
        body["temperature"] = request["temperature"]
    if "stop_sequences" in request:
        body["stop"] = request["stop_sequences"]
    if "tools" in request:
        body["tools"] = [
            _with_cache(
                {
                    "type": "function",
                    "function": {
                        "name": t["name"],
                        "description": t["description"],
                        "parameters": t["input_schema"],
                    },
                },
                t.get("cache_control"),
            )
            for t in request["tools"]
        ]
        choice = request["tool_choice"]
        names = {"auto": "auto", "any": "required", "none": "none"}
        body["tool_choice"] = (
            names[choice["type"]]
            if choice["type"] in names
            else {"type": "function", "function": {"name": choice["name"]}}
        )
    return body


def _turn(turn: dict[str, Any]) -> list[dict[str, Any]]:
    """One Anthropic turn as OpenAI messages (tool results become tool messages)."""
    blocks = turn["content"]
    if turn["role"] == "assistant":
        texts = [_part(b) for b in blocks if b["type"] == "text"]
        calls = [
            {
                "id": b["id"],
                "type": "function",
                "function": {"name": b["name"], "arguments": orjson.dumps(b["input"]).decode()},
            }
            for b in blocks
            if b["type"] == "tool_use"
        ]
        message: dict[str, Any] = {"role": "assistant", "content": texts or None}
        if calls:
            message["tool_calls"] = calls
        return [message]
    messages: list[dict[str, Any]] = []
    rest = []
    for block in blocks:
        if block["type"] == "tool_result":
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": block["tool_use_id"],
                    "content": block["content"],
                }
            )
        else:
            rest.append(_part(block))
    if rest:
        messages.append({"role": "user", "content": rest})
    return messages


def _part(block: dict[str, Any]) -> dict[str, Any]:
    if block["type"] == "text":
        return _with_cache({"type": "text", "text": block["text"]}, block.get("cache_control"))
    source = block["source"]
    url = (
        source["url"]
        if source["type"] == "url"
        else f"data:{source['media_type']};base64,{source['data']}"
    )
    return {"type": "image_url", "image_url": {"url": url}}


@given(anthropic_requests())
def test_what_both_sides_express_round_trips(request: dict[str, Any]) -> None:
    assert to_messages_request(as_openai(request), default_max_tokens=1) == request


@given(anthropic_requests())
def test_translated_requests_are_well_formed(request: dict[str, Any]) -> None:
    out = to_messages_request(as_openai(request), default_max_tokens=1)
    for turn in out["messages"]:
        assert turn["role"] in ("user", "assistant")
        kinds = [block["type"] for block in turn["content"]]
        # Tool results open their user turn; nothing but a user turn holds them.
        results = kinds.count("tool_result")
        assert kinds[:results] == ["tool_result"] * results
        assert results == 0 or turn["role"] == "user"
        assert "tool_use" not in kinds or turn["role"] == "assistant"
