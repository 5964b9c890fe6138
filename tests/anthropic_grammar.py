"""The Anthropic stream grammar, checked: what the unit, property and e2e tests hold every
translated stream to (https://docs.anthropic.com/en/docs/build-with-claude/streaming).

    message_start ping? (content_block_start content_block_delta* content_block_stop)*
    message_delta message_stop

Blocks come one after the other with indices 0, 1, 2...; a delta's type fits its block's
(text_delta in a text block, input_json_delta in a tool_use block); every payload validates
against the official SDK's own event types. Returns the message the events build.
"""

from __future__ import annotations

from typing import Any

import anthropic
import orjson
import pydantic

_EVENT = pydantic.TypeAdapter(anthropic.types.RawMessageStreamEvent)
_DELTA_FOR = {"text": "text_delta", "tool_use": "input_json_delta"}


def check_grammar(frames: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    names = [name for name, _ in frames]
    assert names[0] == "message_start", names
    assert names[-2:] == ["message_delta", "message_stop"], names
    for name, payload in frames:
        assert payload["type"] == name
        if name != "ping":
            _EVENT.validate_python(payload)
    message = dict(frames[0][1]["message"])
    message["content"] = []
    open_block: dict[str, Any] | None = None
    arguments = ""
    for name, payload in frames[1:-2]:
        if name == "ping":
            continue
        if name == "content_block_start":
            assert open_block is None, "a block started inside another"
            assert payload["index"] == len(message["content"])
            open_block = dict(payload["content_block"])
            arguments = ""
        elif name == "content_block_delta":
            assert open_block is not None
            assert payload["index"] == len(message["content"])
            delta = payload["delta"]
            assert delta["type"] == _DELTA_FOR[open_block["type"]]
            if delta["type"] == "text_delta":
                open_block["text"] += delta["text"]
            else:
                arguments += delta["partial_json"]
        else:
            assert name == "content_block_stop", name
            assert open_block is not None
            assert payload["index"] == len(message["content"])
            if open_block["type"] == "tool_use":
                open_block["input"] = orjson.loads(arguments) if arguments else {}
            message["content"].append(open_block)
            open_block = None
    assert open_block is None, "a block was never stopped"
    delta = frames[-2][1]
    message.update(delta["delta"])
    message["usage"] = {**message["usage"], **delta["usage"]}
    return message
