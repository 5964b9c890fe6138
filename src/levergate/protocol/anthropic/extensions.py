"""Anthropic-only features carried inside the OpenAI-shaped body, and what an OpenAI-compatible
upstream does with them.

The Anthropic inbound edge (`protocol/anthropic/edge_request.py`) turns a Messages request into the
pipeline's OpenAI-shaped chat `Call`, so every lever applies unchanged. What the OpenAI chat
API has no field for rides along as an *extension*, in the place an Anthropic upstream
(`kind: anthropic`, which translates the body back) finds it:

    cache_control   on a content part, a system part, a tool result part, an assistant's
                    tool call, on a tool
                    (`{"type": "function", "function": {...}, "cache_control": {...}}`), and
                    top level (Anthropic's automatic breakpoint on the last block)
    text parts      a message whose content stays a list of text parts (several text blocks,
                    or one with a breakpoint), which Anthropic keeps apart
    is_error        on a `role: tool` message (Anthropic's `tool_result.is_error`)
    top_k           top level, as Anthropic spells it
    thinking        top level, Anthropic's `thinking` object (`enabled` / `adaptive`)
    speed           top level, `"fast"` (Anthropic's fast mode; `standard` is left out)
    <block type>    an Anthropic content block with no OpenAI equivalent (`document`,
                    `thinking`, `redacted_thinking`, `search_result`, ...) carried verbatim
                    as a content part of that `type`
    tool:<type>     an Anthropic server tool (`web_search_20250305`, `bash_20250124`, ...)
                    carried verbatim in `tools`
    citations       a text block's `citations`, kept on its part
    image source    an image given as a Files API `file_id` (`source.type: file`)

`metadata.user_id` needs no extension: it is OpenAI's own `user` field.

The edge records the names a call uses on `Context.extensions` (empty for every plain OpenAI
call), so an upstream decides with one attribute test, and the plain OpenAI path pays nothing.
An OpenAI-compatible upstream (`upstreams/http.py`) and the embedded engine
(`upstreams/local/endpoint.py`) then call `for_openai`:

- hints are dropped: `cache_control` (a prompt-caching breakpoint: OpenAI caches prefixes on
  its own, so the answer is the same without it) and `is_error` (the tool's error text still
  reaches the model as the tool message's content);
- content that is text parts only, once the hints are gone, becomes one string, the parts
  joined by a newline (as vLLM joins a text-only content array): the shape every
  OpenAI-compatible server takes, where llama.cpp's Python server answers an array with a 500;
- `top_k` is passed on: vLLM, SGLang, llama.cpp's server and the embedded engine sample with
  it; api.openai.com refuses it with its own 400 naming the field, which reaches the client as
  it is;
- everything else cannot be expressed there and is a 400 naming it, never a silently dropped
  part.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from levergate.core.call import Call
from levergate.errors import BadRequest
from levergate.protocol.openai.body import joined_text

CACHE_CONTROL = "cache_control"
IS_ERROR = "is_error"
TOP_K = "top_k"
THINKING = "thinking"
CITATIONS = "citations"
IMAGE_FILE = "image source"
TEXT_PARTS = "text parts"
SPEED = "speed"
TOOL_PREFIX = "tool:"

# Dropped (or, for text parts, joined) before an OpenAI-compatible upstream: they change cost,
# bookkeeping or the framing of the text, not the answer.
HINTS = frozenset({CACHE_CONTROL, IS_ERROR, TEXT_PARTS})
# Passed on as they are: self-hosted OpenAI-compatible servers take them.
PASSED = frozenset({TOP_K})


def for_openai(call: Call, *, upstream: str) -> Call:
    """The call as an OpenAI-compatible upstream may receive it: hints dropped, a 400 naming
    what it cannot express. Only called for calls with extensions."""
    extensions = call.ctx.extensions
    refused = sorted(extensions - HINTS - PASSED)
    if refused:
        raise BadRequest(
            f"The upstream '{upstream}' speaks the OpenAI API, which cannot express: "
            f"{', '.join(refused)}. Send the request to a model on an Anthropic upstream, or "
            "leave these out.",
            param=refused[0],
            code="unsupported_for_upstream",
        )
    if not extensions & HINTS:
        return call
    return dataclasses.replace(call, body=_without_hints(call.body), raw=None)


def _without_hints(body: Mapping[str, Any]) -> dict[str, Any]:
    """`body` rebuilt without its hints (nothing is mutated)."""
    out = {k: v for k, v in body.items() if k != CACHE_CONTROL}
    messages = body.get("messages")
    if isinstance(messages, list):
        out["messages"] = [_message(m) for m in messages]
    tools = body.get("tools")
    if isinstance(tools, list):
        out["tools"] = [_drop(t, CACHE_CONTROL) for t in tools]
    return out


def _message(message: Any) -> Any:
    if not isinstance(message, Mapping):
        return message
    message = _drop(message, IS_ERROR)
    content = message.get("content")
    if isinstance(content, list):
        parts = [_drop(part, CACHE_CONTROL) for part in content]
        message = {**message, "content": joined_text(parts)}
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        message = {**message, "tool_calls": [_drop(c, CACHE_CONTROL) for c in calls]}
    return message


def _drop(value: Any, key: str) -> Any:
    if isinstance(value, Mapping) and key in value:
        return {k: v for k, v in value.items() if k != key}
    return value
