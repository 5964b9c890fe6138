"""Anthropic wire shapes the simulator answers `/v1/messages` with: the message, the stream
events, the error envelope and the `anthropic-ratelimit-*` headers.

Pure, like responses.py: generated words and token counts in, bytes out. Shapes follow
Anthropic's Messages API reference, streaming page (every event as `event: <type>` plus
`data: <json>`; a `ping` after the first block starts), errors page (`{"type": "error",
"error": {"type", "message"}, "request_id"}`) and rate-limits page (`anthropic-ratelimit-
{requests,tokens,input-tokens,output-tokens}-{limit,remaining,reset}`, reset as RFC 3339;
`retry-after` in seconds), so the official `anthropic` SDK parses them (tests/e2e prove it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from levergate.policies.backoff import parse_duration
from levergate.simulator.anthropic_cache import CacheUsage

# Status -> Anthropic error type (errors page). A 503 fault is answered as Anthropic's
# overload, 529: Anthropic sends no 503.
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


@dataclass(slots=True)
class Message:
    id: str
    model: str
    text: list[str]  # output tokens of the text block
    tool: dict[str, Any] | None  # {"id", "name", "input"} of a tool_use block, or None
    stop_reason: str
    usage: CacheUsage
    output_tokens: int


def usage_object(message: Message) -> dict[str, Any]:
    usage = message.usage
    return {
        "input_tokens": usage.input_tokens,
        "cache_creation_input_tokens": usage.written,
        "cache_read_input_tokens": usage.read,
        "cache_creation": {
            "ephemeral_5m_input_tokens": usage.written_5m,
            "ephemeral_1h_input_tokens": usage.written_1h,
        },
        "output_tokens": message.output_tokens,
        "service_tier": "standard",
    }


def _content(message: Message) -> list[dict[str, Any]]:
    content: list[dict[str, Any]] = [{"type": "text", "text": "".join(message.text)}]
    if message.tool is not None:
        content.append({"type": "tool_use", **message.tool})
    return content


def message_body(message: Message) -> bytes:
    return orjson.dumps(
        {
            "id": message.id,
            "type": "message",
            "role": "assistant",
            "model": message.model,
            "content": _content(message),
            "stop_reason": message.stop_reason,
            "stop_sequence": None,
            "usage": usage_object(message),
        }
    )


def _event(kind: str, data: dict[str, Any]) -> bytes:
    return b"event: %s\ndata: %s\n\n" % (kind.encode(), orjson.dumps({"type": kind, **data}))


def stream_events(message: Message) -> tuple[list[bytes], list[int]]:
    """(SSE events, output-token step of each), paced by the server like the OpenAI stream."""
    start: dict[str, Any] = {
        "id": message.id,
        "type": "message",
        "role": "assistant",
        "model": message.model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {**usage_object(message), "output_tokens": 1},
    }
    events = [
        _event("message_start", {"message": start}),
        _event("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
        _event("ping", {}),
    ]
    steps = [0, 0, 0]
    for step, token in enumerate(message.text):
        delta = {"type": "text_delta", "text": token}
        events.append(_event("content_block_delta", {"index": 0, "delta": delta}))
        steps.append(step)
    last = max(0, len(message.text) - 1)
    events.append(_event("content_block_stop", {"index": 0}))
    steps.append(last)
    if message.tool is not None:
        block = {"type": "tool_use", "id": message.tool["id"], "name": message.tool["name"]}
        events.append(
            _event("content_block_start", {"index": 1, "content_block": {**block, "input": {}}})
        )
        arguments = orjson.dumps(message.tool["input"]).decode()
        pieces = [arguments[i : i + 16] for i in range(0, len(arguments), 16)]
        for piece in pieces:
            delta = {"type": "input_json_delta", "partial_json": piece}
            events.append(_event("content_block_delta", {"index": 1, "delta": delta}))
        events.append(_event("content_block_stop", {"index": 1}))
        steps += [last] * (len(pieces) + 2)
    final = {"output_tokens": message.output_tokens}
    stop = {"stop_reason": message.stop_reason, "stop_sequence": None}
    events.append(_event("message_delta", {"delta": stop, "usage": final}))
    events.append(_event("message_stop", {}))
    steps += [last, last]
    return events, steps


def error_body(status: int, message: str, *, request_id: str) -> bytes:
    kind = ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return orjson.dumps(
        {"type": "error", "error": {"type": kind, "message": message}, "request_id": request_id}
    )


def ratelimit_headers(
    openai_style: tuple[tuple[str, str], ...], *, wall: float
) -> tuple[tuple[str, str], ...]:
    """The limiter's `x-ratelimit-*` / `retry-after` headers in Anthropic's names and formats:
    `-{limit,remaining,reset}` per dimension, reset as an RFC 3339 time; `retry-after` only
    (Anthropic sends no `retry-after-ms`)."""
    out: list[tuple[str, str]] = []
    for name, value in openai_style:
        if name == "retry-after":
            out.append((name, value))
            continue
        if not name.startswith("x-ratelimit-"):
            continue
        field, _, dimension = name[len("x-ratelimit-") :].partition("-")
        stamp = _rfc3339(wall + (parse_duration(value) or 0.0)) if field == "reset" else value
        out.append((f"anthropic-ratelimit-{dimension}-{field}", stamp))
    return tuple(out)


def _rfc3339(stamp: float) -> str:
    # Whole seconds, rounded up: a client waiting until then is never early.
    moment = datetime.fromtimestamp(math.ceil(stamp), tz=UTC)
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


def count_body(tokens: int) -> bytes:
    return orjson.dumps({"input_tokens": tokens})


def malformed_body(*, stream: bool) -> bytes:
    """An answer that starts like an Anthropic message and stops being JSON."""
    if stream:
        return b'event: message_start\ndata: {"type": "message_start", "message": {\n\n'
    return b'{"id": "msg_broken", "type": "message", "content": ['
