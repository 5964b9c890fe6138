"""A chat-completions stream translated, chunk by chunk, into a Responses event stream.

Where in the stack: `layers/responses.py` runs every translated stream through an
`EventWriter`: `open()` once (after the first chat chunk arrived, so a failure before the first
byte is still an HTTP error Retry and Fallback can act on), `feed(chunk)` per chat chunk,
`close()` at the clean end, `fail(error)` when the chat stream broke. Each returns the events
to send, in order; nothing is buffered beyond the open items' accumulated text, which the done
events and `response.completed` must carry whole.

Invariants (tests/properties/test_responses_stream.py): sequence numbers rise by one from 0;
every `output_item.added` has its `output_item.done`; the deltas of a part concatenate to its
done text; the final event carries the same items the done events did.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from levergate.core.json_bound import parse_json
from levergate.protocol.responses.answer import (
    finished,
    function_item,
    message_item,
    new_id,
    skeleton,
    text_part,
    usage_from_chat,
)

Events = list[dict[str, Any]]


@dataclass
class _Message:
    index: int
    id: str
    parts: list[dict[str, Any]] = field(default_factory=list)  # output_text / refusal parts


@dataclass
class _Function:
    index: int
    id: str
    call_id: str
    name: str
    arguments: list[str] = field(default_factory=list)


class EventWriter:
    def __init__(self, body: Mapping[str, Any], *, response_id: str, model: str) -> None:
        self.response = skeleton(body, response_id=response_id, model=model)
        self._seq = 0
        self._message: _Message | None = None
        self._functions: dict[int, _Function] = {}  # by the chat tool call's index
        self._items: list[dict[str, Any] | None] = []  # finished items, by output index
        self._finish: str | None = None
        self._usage: dict[str, Any] | None = None

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"type": kind, **fields, "sequence_number": self._seq}
        self._seq += 1
        return event

    def open(self) -> Events:
        snapshot = parse_json(orjson.dumps(self.response))
        return [
            self._event("response.created", response=snapshot),
            self._event("response.in_progress", response=snapshot),
        ]

    def feed(self, chunk: Mapping[str, Any]) -> Events:
        events: Events = []
        if isinstance(usage := chunk.get("usage"), Mapping):
            self._usage = usage_from_chat(usage)
        choices = chunk.get("choices")
        for choice in choices if isinstance(choices, list) else ():
            if not isinstance(choice, Mapping) or choice.get("index", 0) != 0:
                continue  # Responses has one answer; the bridge never asks chat for n > 1
            delta = choice.get("delta")
            if isinstance(delta, Mapping):
                self._delta(delta, events)
            if isinstance(finish := choice.get("finish_reason"), str):
                self._finish = finish
        return events

    def _delta(self, delta: Mapping[str, Any], events: Events) -> None:
        if isinstance(text := delta.get("content"), str) and text:
            self._part_delta("output_text", "text", text, events)
        if isinstance(refusal := delta.get("refusal"), str) and refusal:
            self._part_delta("refusal", "refusal", refusal, events)
        calls = delta.get("tool_calls")
        for call in calls if isinstance(calls, list) else ():
            if isinstance(call, Mapping):
                self._call_delta(call, events)

    def _part_delta(self, kind: str, field_name: str, text: str, events: Events) -> None:
        message = self._message
        if message is None:
            message = self._message = _Message(self._reserve(), new_id("msg"))
            item = message_item(message.id, [], status="in_progress")
            events.append(
                self._event("response.output_item.added", output_index=message.index, item=item)
            )
        part = message.parts[-1] if message.parts else None
        if part is None or part["type"] != kind:
            if part is not None:
                events += self._part_done(message)
            part = text_part("") if kind == "output_text" else {"type": "refusal", "refusal": ""}
            message.parts.append(part)
            events.append(
                self._event(
                    "response.content_part.added",
                    item_id=message.id,
                    output_index=message.index,
                    content_index=len(message.parts) - 1,
                    part=dict(part),
                )
            )
        part[field_name] += text
        extra: dict[str, Any] = {"logprobs": []} if kind == "output_text" else {}
        events.append(
            self._event(
                f"response.{kind}.delta",
                item_id=message.id,
                output_index=message.index,
                content_index=len(message.parts) - 1,
                delta=text,
                **extra,
            )
        )

    def _call_delta(self, call: Mapping[str, Any], events: Events) -> None:
        index = call.get("index", 0)
        index = index if isinstance(index, int) else 0
        function = call.get("function")
        function = function if isinstance(function, Mapping) else {}
        current = self._functions.get(index)
        if current is None:
            if self._message is not None:  # the text before a call is its own, finished item
                events += self._message_done()
            name = function.get("name")
            current = _Function(
                self._reserve(),
                new_id("fc"),
                str(call.get("id") or new_id("call")),
                name if isinstance(name, str) else "",
            )
            self._functions[index] = current
            item = function_item(
                current.id,
                call_id=current.call_id,
                name=current.name,
                arguments="",
                status="in_progress",
            )
            events.append(
                self._event("response.output_item.added", output_index=current.index, item=item)
            )
        if isinstance(arguments := function.get("arguments"), str) and arguments:
            current.arguments.append(arguments)
            events.append(
                self._event(
                    "response.function_call_arguments.delta",
                    item_id=current.id,
                    output_index=current.index,
                    delta=arguments,
                )
            )

    def _reserve(self) -> int:
        self._items.append(None)
        return len(self._items) - 1

    def _part_done(self, message: _Message) -> Events:
        part = message.parts[-1]
        index = len(message.parts) - 1
        kind, name = (
            ("output_text", "text") if part["type"] == "output_text" else ("refusal", "refusal")
        )
        extra: dict[str, Any] = {"logprobs": []} if kind == "output_text" else {}
        return [
            self._event(
                f"response.{kind}.done",
                item_id=message.id,
                output_index=message.index,
                content_index=index,
                **{name: part[name]},
                **extra,
            ),
            self._event(
                "response.content_part.done",
                item_id=message.id,
                output_index=message.index,
                content_index=index,
                part=dict(part),
            ),
        ]

    def _message_done(self) -> Events:
        message, self._message = self._message, None
        assert message is not None  # noqa: S101 - callers check
        events = self._part_done(message) if message.parts else []
        item = message_item(message.id, [dict(p) for p in message.parts], status="completed")
        self._items[message.index] = item
        events.append(
            self._event("response.output_item.done", output_index=message.index, item=item)
        )
        return events

    def _functions_done(self) -> Events:
        events: Events = []
        for current in sorted(self._functions.values(), key=lambda f: f.index):
            arguments = "".join(current.arguments)
            item = function_item(
                current.id,
                call_id=current.call_id,
                name=current.name,
                arguments=arguments,
                status="completed",
            )
            self._items[current.index] = item
            events.append(
                self._event(
                    "response.function_call_arguments.done",
                    item_id=current.id,
                    output_index=current.index,
                    name=current.name,
                    arguments=arguments,
                )
            )
            events.append(
                self._event("response.output_item.done", output_index=current.index, item=item)
            )
        self._functions = {}
        return events

    def close(self) -> Events:
        """The clean end: every open item done, then `response.completed` (or `.incomplete`)."""
        events = self._message_done() if self._message is not None else []
        events += self._functions_done()
        response = finished(self.response, finish=self._finish, usage=self._usage)
        response["output"] = [item for item in self._items if item is not None]
        kind = "response.incomplete" if response["status"] == "incomplete" else "response.completed"
        events.append(self._event(kind, response=response))
        return events

    def fail(self, *, code: str, message: str) -> Events:
        """The chat stream broke: the response failed, with what it had produced so far."""
        response = self.response
        response["status"] = "failed"
        response["error"] = {"code": code, "message": message}
        response["output"] = [item for item in self._items if item is not None]
        return [self._event("response.failed", response=response)]
