"""Anthropic Messages stream events -> OpenAI chat completion chunks.

Where in the stack: `upstreams/anthropic.py` decodes the upstream's SSE and feeds each event's
JSON here; what comes out is exactly what an OpenAI-compatible upstream would have streamed, so
every layer above (measure, caches, the usage filter at the edge) sees one stream shape.

Wire format: Anthropic's streaming page — `message_start` (the message skeleton with its
input usage), per block `content_block_start` (`text`, `tool_use` {id, name}, `thinking`),
`content_block_delta` (`text_delta`, `input_json_delta` {partial_json}, `thinking_delta`,
`signature_delta`), `content_block_stop`, then `message_delta` (`stop_reason` and cumulative
`usage`), `message_stop`; `ping` anywhere; `error` `{"error": {"type", "message"}}` mid-stream.
Checked against the `anthropic` SDK's `RawMessageStreamEvent` union.

Mapping: `message_start` -> the role preamble chunk; text deltas -> `delta.content`; a tool_use
block -> a `tool_calls` entry (index = the tool's position among tool blocks, with id, name
and empty arguments), its `input_json_delta`s -> argument fragments at that index; thinking
deltas -> `delta.reasoning_content`; `message_delta` -> the finish chunk; `message_stop` -> the
final usage chunk (`choices: []`; the edge drops it when the client did not ask for
`stream_options.include_usage`). Pings, stops of blocks and signatures produce nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from levergate.protocol.anthropic.common import finish_reason
from levergate.protocol.anthropic.upstream_answer import openai_usage


class StreamError(Exception):
    """The upstream sent an `error` event; carries its error object."""

    def __init__(self, error: Mapping[str, Any]) -> None:
        message = error.get("message")
        super().__init__(message if isinstance(message, str) else "stream error")
        self.error = error


class StreamTranslator:
    """Stateful: one per upstream stream. `feed` returns the chunks one event becomes; `done`
    says `message_stop` arrived (a stream that ends before it was cut)."""

    __slots__ = ("_created", "_id", "_model", "_tools", "_usage", "done")

    def __init__(self, *, created: int, model: str) -> None:
        self._created = created
        self._id = ""
        self._model = model
        self._tools: dict[int, int] = {}  # Anthropic block index -> OpenAI tool_calls index
        self._usage: dict[str, Any] = {}
        self.done = False

    def feed(self, event: Mapping[str, Any]) -> list[dict[str, Any]]:
        kind = event.get("type")
        if kind == "content_block_delta":  # the common case first
            return self._delta(event)
        if kind == "message_start":
            return self._start(event)
        if kind == "content_block_start":
            return self._block_start(event)
        if kind == "message_delta":
            return self._message_delta(event)
        if kind == "message_stop":
            self.done = True
            return [{**self._head(), "choices": [], "usage": openai_usage(self._usage)}]
        if kind == "error":
            error = event.get("error")
            raise StreamError(error if isinstance(error, Mapping) else {"message": str(error)})
        return []  # ping, content_block_stop, and event types added later

    def _head(self) -> dict[str, Any]:
        return {
            "id": self._id,
            "object": "chat.completion.chunk",
            "created": self._created,
            "model": self._model,
        }

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return {**self._head(), "choices": [choice]}

    def _start(self, event: Mapping[str, Any]) -> list[dict[str, Any]]:
        message = event.get("message")
        if isinstance(message, Mapping):
            self._id = str(message.get("id") or "")
            self._model = str(message.get("model") or self._model)
            usage = message.get("usage")
            if isinstance(usage, Mapping):
                self._usage.update(usage)
        return [self._chunk({"role": "assistant", "content": ""})]

    def _block_start(self, event: Mapping[str, Any]) -> list[dict[str, Any]]:
        block = event.get("content_block")
        if not isinstance(block, Mapping):
            return []
        kind = block.get("type")
        if kind == "tool_use":
            position = len(self._tools)
            self._tools[_index(event)] = position
            call = {
                "index": position,
                "id": block.get("id") or "",
                "type": "function",
                "function": {"name": block.get("name") or "", "arguments": ""},
            }
            return [self._chunk({"tool_calls": [call]})]
        if kind == "text" and block.get("text"):
            return [self._chunk({"content": block["text"]})]
        return []

    def _delta(self, event: Mapping[str, Any]) -> list[dict[str, Any]]:
        delta = event.get("delta")
        if not isinstance(delta, Mapping):
            return []
        kind = delta.get("type")
        if kind == "text_delta":
            return [self._chunk({"content": delta.get("text") or ""})]
        if kind == "input_json_delta":
            position = self._tools.get(_index(event))
            if position is None:
                return []
            arguments = delta.get("partial_json") or ""
            fragment = {"index": position, "function": {"arguments": arguments}}
            return [self._chunk({"tool_calls": [fragment]})]
        if kind == "thinking_delta":
            return [self._chunk({"reasoning_content": delta.get("thinking") or ""})]
        return []

    def _message_delta(self, event: Mapping[str, Any]) -> list[dict[str, Any]]:
        usage = event.get("usage")
        if isinstance(usage, Mapping):
            # Cumulative counts: they replace what message_start said.
            self._usage.update({k: v for k, v in usage.items() if v is not None})
        delta = event.get("delta")
        stop = delta.get("stop_reason") if isinstance(delta, Mapping) else None
        return [self._chunk({}, finish_reason(stop) or "stop")]


def _index(event: Mapping[str, Any]) -> int:
    index = event.get("index")
    return index if isinstance(index, int) else -1
