"""The pipeline's OpenAI-shaped answer as Anthropic's: a whole `message`, or its event stream.

Where in the stack: at the edge only (`server/handlers/anthropic.py`), after `Gateway.serve`;
the caches, measurement and limits below have seen an ordinary chat answer.

A whole answer (https://docs.anthropic.com/en/api/messages, the SDK's `Message`):

    {"id": "msg_...", "type": "message", "role": "assistant", "model": ..., "content": [
      {"type": "text", "text": ...}, {"type": "tool_use", "id", "name", "input": {...}}],
     "stop_reason": "end_turn" | "stop_sequence" | "max_tokens" | "tool_use" | "refusal",
     "stop_sequence": null | "...", "usage": {"input_tokens", "output_tokens",
     "cache_creation_input_tokens", "cache_read_input_tokens"}}

A stream (https://docs.anthropic.com/en/docs/build-with-claude/streaming) is `message_start`
(the message with empty content), `ping`, then per content block `content_block_start`,
`content_block_delta` (`text_delta` or `input_json_delta`) and `content_block_stop`, one block
after the other, then `message_delta` (stop_reason, stop_sequence and the cumulative usage) and
`message_stop`. `EventTranslator` builds that grammar from OpenAI chunks as they arrive: text
opens a text block, each tool call (by its OpenAI `index`) a tool_use block whose argument
fragments become `input_json_delta`s; usage arrives in OpenAI's last chunk, so message_start
says 0 input tokens and message_delta carries the real figures (the SDK overwrites them).

Usage follows Anthropic's convention: `input_tokens` EXCLUDES cached reads and cache writes,
while OpenAI's `prompt_tokens` includes `prompt_tokens_details.cached_tokens`. An Anthropic
upstream's translated usage carries `cache_read_input_tokens` / `cache_creation_input_tokens`
at the top level (its prompt_tokens counting both, in OpenAI's convention): they win when there.

Stop reasons: stop -> end_turn, or stop_sequence when the upstream said which sequence matched
(`stop_sequence` on the choice from an Anthropic upstream, vLLM's string `stop_reason`); length
-> max_tokens; tool_calls -> tool_use; content_filter -> refusal; a finish_reason that already
is an Anthropic stop reason passes as it is. OpenAI's `reasoning_content` is not turned into
`thinking` blocks (they would need a signature the upstream never gave).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from levergate.core.json_bound import parse_json
from levergate.core.tokenizer import filled_flag
from levergate.errors import UpstreamUnavailable
from levergate.policies.pricing import from_usage

Frame = tuple[str, dict[str, Any]]

STOP_REASONS = frozenset(
    {"end_turn", "max_tokens", "stop_sequence", "tool_use", "pause_turn", "refusal",
     "model_context_window_exceeded"}
)  # fmt: skip
_FINISH = {"length": "max_tokens", "tool_calls": "tool_use", "function_call": "tool_use",
           "content_filter": "refusal"}  # fmt: skip


def message_id(openai_id: Any, *, fallback: str) -> str:
    if not isinstance(openai_id, str) or not openai_id:
        return f"msg_{fallback}"
    if openai_id.startswith("msg_"):
        return openai_id
    return "msg_" + openai_id.removeprefix("chatcmpl-")


def stop_of(choice: Mapping[str, Any], stops: Sequence[str]) -> tuple[str, str | None]:
    """(stop_reason, stop_sequence) for an OpenAI choice's finish."""
    finish = choice.get("finish_reason")
    if finish in STOP_REASONS:
        matched = choice.get("stop_sequence")
        return str(finish), matched if isinstance(matched, str) else None
    if finish in _FINISH:
        return _FINISH[finish], None
    for key in ("stop_sequence", "stop_reason"):
        matched = choice.get(key)
        if isinstance(matched, str) and matched in stops:
            return "stop_sequence", matched
    return "end_turn", None


def usage_of(usage: Mapping[str, Any] | None) -> dict[str, Any]:
    """Anthropic's usage from the pipeline's OpenAI-shaped one, through the ledger's reading
    of it: `input_tokens` excludes the cache reads and writes, as Anthropic counts."""
    t = from_usage(usage)
    return {
        "input_tokens": t.input_uncached,
        "output_tokens": t.output,
        "cache_creation_input_tokens": t.cache_write,
        "cache_read_input_tokens": t.cached_read,
        **filled_flag(usage),  # counted by levergate (layers/usage.py): said so
    }


def to_message(
    data: Mapping[str, Any], *, stops: Sequence[str], fallback_id: str
) -> dict[str, Any]:
    """A whole OpenAI chat completion as an Anthropic message."""
    choices = data.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices else {}
    choice = choice if isinstance(choice, Mapping) else {}
    message = choice.get("message")
    message = message if isinstance(message, Mapping) else {}
    content: list[dict[str, Any]] = []
    text = message.get("content")
    if isinstance(text, str) and text:
        content.append({"type": "text", "text": text})
    refusal = message.get("refusal")
    if isinstance(refusal, str) and refusal:
        content.append({"type": "text", "text": refusal})
    calls = message.get("tool_calls")
    for call in calls if isinstance(calls, list) else ():
        function = call.get("function") if isinstance(call, Mapping) else None
        if isinstance(function, Mapping):
            arguments = function.get("arguments")
            content.append(_tool_use(call.get("id"), function.get("name"), arguments))
    reason, sequence = stop_of(choice, stops)
    if refusal and reason == "end_turn":
        reason = "refusal"
    return {
        "id": message_id(data.get("id"), fallback=fallback_id),
        "type": "message",
        "role": "assistant",
        "model": data.get("model") if isinstance(data.get("model"), str) else "",
        "content": content,
        "stop_reason": reason,
        "stop_sequence": sequence,
        "usage": usage_of(data.get("usage") if isinstance(data.get("usage"), Mapping) else None),
    }


def _tool_use(call_id: Any, name: Any, arguments: Any) -> dict[str, Any]:
    try:
        parsed = parse_json(arguments) if isinstance(arguments, str) and arguments else {}
    except orjson.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, dict):
        raise UpstreamUnavailable(
            f"the upstream's call of tool '{name}' has arguments that are not a JSON object",
            code="malformed_tool_arguments",
        )
    return {"type": "tool_use", "id": str(call_id or ""), "name": str(name or ""), "input": parsed}


def events_of(message: Mapping[str, Any]) -> list[Frame]:
    """The event stream of a whole message (a cached or non-streaming answer to a stream)."""
    empty = {**message, "content": [], "stop_reason": None, "stop_sequence": None}
    frames: list[Frame] = [_start(empty), ("ping", {"type": "ping"})]
    for index, block in enumerate(message["content"]):
        head: dict[str, Any]
        delta: dict[str, Any]
        if block["type"] == "text":
            head = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            head = {**block, "input": {}}
            delta = {
                "type": "input_json_delta",
                "partial_json": orjson.dumps(block["input"]).decode(),
            }
        start = {"type": "content_block_start", "index": index, "content_block": head}
        frames += [
            ("content_block_start", start),
            (
                "content_block_delta",
                {"type": "content_block_delta", "index": index, "delta": delta},
            ),
            ("content_block_stop", {"type": "content_block_stop", "index": index}),
        ]
    frames += _end(message["stop_reason"], message["stop_sequence"], message["usage"])
    return frames


def _start(message: Mapping[str, Any]) -> Frame:
    return "message_start", {"type": "message_start", "message": dict(message)}


def _end(reason: str, sequence: str | None, usage: Mapping[str, Any]) -> list[Frame]:
    delta = {"stop_reason": reason, "stop_sequence": sequence}
    return [
        ("message_delta", {"type": "message_delta", "delta": delta, "usage": dict(usage)}),
        ("message_stop", {"type": "message_stop"}),
    ]


class EventTranslator:
    """OpenAI chat chunks in, Anthropic stream events out (see the module docstring). Pure:
    `feed` each parsed chunk, then `finish` once the OpenAI stream has ended."""

    def __init__(self, *, stops: Sequence[str], fallback_id: str) -> None:
        self._stops = stops
        self._fallback_id = fallback_id
        self._started = False
        self._index = -1  # the last block's index; -1 before the first
        self._open: str | None = None  # the open block's type
        self._tools: dict[int, int] = {}  # OpenAI tool-call index -> block index
        self._choice: Mapping[str, Any] = {}
        self._usage: Mapping[str, Any] | None = None

    def feed(self, chunk: Mapping[str, Any]) -> list[Frame]:
        frames = [] if self._started else self._begin(chunk)
        usage = chunk.get("usage")
        if isinstance(usage, Mapping):
            self._usage = usage
        choices = chunk.get("choices")
        for choice in choices if isinstance(choices, list) else ():
            if not isinstance(choice, Mapping) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta")
            delta = delta if isinstance(delta, Mapping) else {}
            for key in ("content", "refusal"):
                text = delta.get(key)
                if isinstance(text, str) and text:
                    frames += self._text(text)
            calls = delta.get("tool_calls")
            for call in calls if isinstance(calls, list) else ():
                if isinstance(call, Mapping):
                    frames += self._tool(call)
            if choice.get("finish_reason") is not None:
                self._choice = choice
        return frames

    def finish(self) -> list[Frame]:
        frames = [] if self._started else self._begin({})
        if self._open:
            frames.append(self._stop())
        reason, sequence = stop_of(self._choice, self._stops)
        return frames + _end(reason, sequence, usage_of(self._usage))

    def _begin(self, chunk: Mapping[str, Any]) -> list[Frame]:
        self._started = True
        model = chunk.get("model")
        message: dict[str, Any] = {
            "id": message_id(chunk.get("id"), fallback=self._fallback_id),
            "type": "message", "role": "assistant", "model": _str(model),
            "content": [], "stop_reason": None, "stop_sequence": None, "usage": usage_of(None),
        }  # fmt: skip
        return [_start(message), ("ping", {"type": "ping"})]

    def _open_block(self, block: dict[str, Any]) -> list[Frame]:
        frames = [self._stop()] if self._open else []
        self._index += 1
        self._open = block["type"]
        start = {"type": "content_block_start", "index": self._index, "content_block": block}
        return [*frames, ("content_block_start", start)]

    def _stop(self) -> Frame:
        self._open = None
        return "content_block_stop", {"type": "content_block_stop", "index": self._index}

    def _delta(self, delta: dict[str, Any]) -> Frame:
        return "content_block_delta", {"type": "content_block_delta", "index": self._index,
                                       "delta": delta}  # fmt: skip

    def _text(self, text: str) -> list[Frame]:
        frames = [] if self._open == "text" else self._open_block({"type": "text", "text": ""})
        return [*frames, self._delta({"type": "text_delta", "text": text})]

    def _tool(self, call: Mapping[str, Any]) -> list[Frame]:
        slot = call.get("index", 0)
        slot = slot if isinstance(slot, int) else 0
        function = call.get("function")
        function = function if isinstance(function, Mapping) else {}
        frames: list[Frame] = []
        if slot not in self._tools:
            name, call_id = function.get("name"), call.get("id")
            frames = self._open_block({
                "type": "tool_use", "id": call_id if isinstance(call_id, str) else "",
                "name": name if isinstance(name, str) else "", "input": {},
            })  # fmt: skip
            self._tools[slot] = self._index
        elif self._tools[slot] != self._index or not self._open:
            raise UpstreamUnavailable(
                "the upstream interleaved the fragments of two tool calls",
                code="interleaved_tool_calls",
            )
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments:
            frames.append(self._delta({"type": "input_json_delta", "partial_json": arguments}))
        return frames


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def frame(name: str, payload: Mapping[str, Any]) -> bytes:
    """One server-sent event as Anthropic writes it: `event:` line, `data:` line, blank line."""
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"
