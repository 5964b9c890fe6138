"""Anthropic Messages answer -> OpenAI chat completion: the message, its usage, its error
object and its rate-limit headers, for `kind: anthropic` upstreams (upstreams/anthropic.py).

Wire format: Anthropic's Messages API reference (a `message` with `content` blocks of `text`,
`tool_use` `{id, name, input}` and `thinking`; `stop_reason`; `usage` with `input_tokens`,
`output_tokens`, `cache_creation_input_tokens`, `cache_read_input_tokens` and `cache_creation:
{ephemeral_5m_input_tokens, ephemeral_1h_input_tokens}`), its errors page (`{"type": "error",
"error": {"type", "message"}, "request_id"}`), and its rate-limits page
(`anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,reset}`,
reset an RFC 3339 time; `retry-after` in seconds) — checked against the `anthropic` SDK's
`Message`, `Usage` and `CacheCreation` types.

Usage, the contract the ledger prices (`input_tokens` at Anthropic EXCLUDES both cache
buckets, where OpenAI's `prompt_tokens` includes its cached tokens):

    prompt_tokens     = input_tokens + cache_read_input_tokens + cache_creation_input_tokens
    completion_tokens = output_tokens
    total_tokens      = prompt_tokens + completion_tokens
    prompt_tokens_details.cached_tokens = cache_read_input_tokens
    + cache_read_input_tokens, cache_creation_input_tokens, cache_creation{...} kept top-level
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import orjson

from levergate.core.quota import Quota, Window, finite_number
from levergate.protocol.anthropic.common import finish_reason


def openai_usage(usage: Mapping[str, Any] | None) -> dict[str, Any]:
    """Anthropic usage in OpenAI's shape (the contract above)."""
    usage = usage or {}
    fresh = _int(usage.get("input_tokens"))
    read = _int(usage.get("cache_read_input_tokens"))
    written = _int(usage.get("cache_creation_input_tokens"))
    prompt = fresh + read + written
    completion = _int(usage.get("output_tokens"))
    out: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": read},
    }
    if "cache_read_input_tokens" in usage:
        out["cache_read_input_tokens"] = read
    if "cache_creation_input_tokens" in usage:
        out["cache_creation_input_tokens"] = written
    if isinstance(tier := usage.get("service_tier"), str):
        out["service_tier"] = tier  # "standard", "priority" or "batch": what served it
    creation = usage.get("cache_creation")
    if isinstance(creation, Mapping):
        out["cache_creation"] = {
            "ephemeral_5m_input_tokens": _int(creation.get("ephemeral_5m_input_tokens")),
            "ephemeral_1h_input_tokens": _int(creation.get("ephemeral_1h_input_tokens")),
        }
    return out


def chat_completion(message: Mapping[str, Any], *, created: int) -> dict[str, Any]:
    """The OpenAI `chat.completion` of one Anthropic `message`."""
    texts: list[str] = []
    thoughts: list[str] = []
    calls: list[dict[str, Any]] = []
    content = message.get("content")
    for block in content if isinstance(content, list) else ():
        kind = block.get("type") if isinstance(block, Mapping) else None
        if kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif kind == "tool_use":
            calls.append(tool_call(block))
        elif kind == "thinking" and isinstance(block.get("thinking"), str):
            thoughts.append(block["thinking"])
    reply: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts else None}
    if thoughts:
        reply["reasoning_content"] = "".join(thoughts)
    if calls:
        reply["tool_calls"] = calls
    usage = message.get("usage")
    return {
        "id": message.get("id") or "",
        "object": "chat.completion",
        "created": created,
        "model": message.get("model") or "",
        "choices": [
            {
                "index": 0,
                "message": reply,
                "logprobs": None,
                "finish_reason": finish_reason(message.get("stop_reason")) or "stop",
            }
        ],
        "usage": openai_usage(usage if isinstance(usage, Mapping) else None),
    }


def tool_call(block: Mapping[str, Any]) -> dict[str, Any]:
    """An OpenAI tool call of a `tool_use` block (arguments as JSON text)."""
    arguments = block.get("input")
    return {
        "id": block.get("id") or "",
        "type": "function",
        "function": {
            "name": block.get("name") or "",
            "arguments": orjson.dumps(arguments if arguments is not None else {}).decode(),
        },
    }


def provider_error(error: Mapping[str, Any]) -> dict[str, Any]:
    """Anthropic's `error` object in OpenAI's field names: `type` kept (Anthropic's names are
    the OpenAI SDK's names for the same statuses: invalid_request_error, authentication_error,
    rate_limit_error, ...), `code` set to it too, `param` None."""
    kind = error.get("type")
    message = error.get("message")
    return {
        "message": message if isinstance(message, str) else "",
        "type": kind if isinstance(kind, str) else "api_error",
        "param": None,
        "code": kind if isinstance(kind, str) else None,
    }


_PREFIX = "anthropic-ratelimit-"
# The token dimensions Anthropic reports; the one with least headroom is the tokens window.
_TOKEN_DIMENSIONS = ("tokens", "input-tokens", "output-tokens")


def anthropic_quota(headers: Mapping[str, str], *, now: float) -> Quota | None:
    """The `anthropic-ratelimit-*` headers as the gateway's `Quota` (None: none sent), so the
    balancer and Retry read Anthropic's headroom exactly as they read `x-ratelimit-*`. `now`
    is the wall clock (reset times are absolute)."""
    requests = _window(headers, "requests", now)
    tokens = [w for d in _TOKEN_DIMENSIONS if (w := _window(headers, d, now)) is not None]
    if requests is None and not tokens:
        return None
    tightest = min(tokens, key=_tightness) if tokens else Window()
    return Quota(requests=requests or Window(), tokens=tightest)


def _tightness(window: Window) -> float:
    share = window.share_left
    return 2.0 if share is None else share


def _window(headers: Mapping[str, str], dimension: str, now: float) -> Window | None:
    base = _PREFIX + dimension
    limit = headers.get(base + "-limit")
    remaining = headers.get(base + "-remaining")
    reset = headers.get(base + "-reset")
    if limit is None and remaining is None and reset is None:
        return None
    return Window(
        limit=finite_number(limit),
        remaining=finite_number(remaining),
        reset_seconds=_until(reset, now),
    )


def _until(stamp: str | None, now: float) -> float | None:
    """Seconds from `now` to an RFC 3339 time (`2026-12-01T17:20:05Z`); None if unreadable."""
    if not stamp:
        return None
    try:
        moment = datetime.fromisoformat(stamp.strip())
    except ValueError:
        return None
    if moment.tzinfo is None:
        return None
    return max(0.0, moment.timestamp() - now)


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0
