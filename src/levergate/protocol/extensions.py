"""Anthropic-only features carried inside the OpenAI-shaped body, and what an OpenAI-compatible
upstream does with them.

The Anthropic inbound edge (`protocol/anthropic_in.py`) turns a Messages request into the
pipeline's OpenAI-shaped chat `Call`, so every lever applies unchanged. What the OpenAI chat
API has no field for rides along as an *extension*, in the place an Anthropic upstream
(`kind: anthropic`, which translates the body back) finds it:

    cache_control   on a content part, a system part, a tool result part, an assistant's
                    tool call, and on a tool
                    (`{"type": "function", "function": {...}, "cache_control": {...}}`)
    is_error        on a `role: tool` message (Anthropic's `tool_result.is_error`)
    top_k           top level, as Anthropic spells it
    thinking        top level, Anthropic's `thinking` object (`enabled` / `adaptive`)
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
An OpenAI-compatible upstream (`upstreams/http.py`) then calls `for_openai`:

- hints are dropped: `cache_control` (a prompt-caching breakpoint: OpenAI caches prefixes on
  its own, so the answer is the same without it) and `is_error` (the tool's error text still
  reaches the model as the tool message's content);
- `top_k` is passed on: vLLM, SGLang and llama.cpp's server sample with it; api.openai.com
  refuses it with its own 400 naming the field, which reaches the client as it is;
- everything else cannot be expressed there and is a 400 naming it, never a silently dropped
  part.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from levergate.core.call import Call
from levergate.errors import BadRequest

CACHE_CONTROL = "cache_control"
IS_ERROR = "is_error"
TOP_K = "top_k"
THINKING = "thinking"
CITATIONS = "citations"
IMAGE_FILE = "image source"
TOOL_PREFIX = "tool:"

# Dropped before an OpenAI-compatible upstream: they change cost or bookkeeping, not the answer.
HINTS = frozenset({CACHE_CONTROL, IS_ERROR})
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
    return call.with_body(**_without_hints(call.body))


def _without_hints(body: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of `body` that held a hint, rebuilt without it (nothing is mutated)."""
    changes: dict[str, Any] = {}
    messages = body.get("messages")
    if isinstance(messages, list):
        changes["messages"] = [_message(m) for m in messages]
    tools = body.get("tools")
    if isinstance(tools, list):
        changes["tools"] = [_drop(t, CACHE_CONTROL) for t in tools]
    return changes


def _message(message: Any) -> Any:
    if not isinstance(message, Mapping):
        return message
    message = _drop(message, IS_ERROR)
    content = message.get("content")
    if isinstance(content, list):
        message = {**message, "content": [_drop(part, CACHE_CONTROL) for part in content]}
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        message = {**message, "tool_calls": [_drop(c, CACHE_CONTROL) for c in calls]}
    return message


def _drop(value: Any, key: str) -> Any:
    if isinstance(value, Mapping) and key in value:
        return {k: v for k, v in value.items() if k != key}
    return value
