"""Between the two shapes of an answer: a whole response and a stream of chunks.

The caches keep an answer in the shape it arrived in (a non-streamed answer's bytes are served
back byte for byte; a streamed answer's events are replayed event for event), and convert only
when the shapes differ: a streamed entry asked for whole is assembled, a whole entry asked for as
a stream is cut into well-formed chunks (role, content or tool calls, finish, then usage). The
same conversions let a coalesced streaming waiter share a non-streaming leader's answer.

`verdict` decides whether an answer may be stored at all: never a content-filtered or unfinished
one, tool calls and several choices only when the rule allows.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from levergate.core.json_bound import parse_json
from levergate.core.reply import Completed, Event, EventSource, Reply, Stream
from levergate.stores.entry import Entry, Form

_FINISHED = frozenset({"stop", "length", "tool_calls", "function_call"})
_HEAD_FIELDS = ("id", "created", "model", "system_fingerprint", "service_tier")
_COMPLETED = Form.COMPLETED  # read once: through the enum metaclass's hook, on every hit


def verdict(data: dict[str, Any], *, allow_tools: bool) -> str | None:
    """None when the whole answer may be cached, else why not."""
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        return "no_choices"
    for choice in choices:
        reason = choice.get("finish_reason") if isinstance(choice, dict) else None
        if reason == "content_filter":
            return "content_filter"
        if reason not in _FINISHED:
            return "unfinished"
        message = choice.get("message")
        calls = isinstance(message, dict) and (
            message.get("tool_calls") or message.get("function_call")
        )
        if (calls or reason in {"tool_calls", "function_call"}) and not allow_tools:
            return "tool_calls"
    return None


async def whole(reply: Reply, kind: str = "chat") -> Completed:
    """`reply` as a whole answer: a stream (an upstream that streams anyway) read to its end,
    assembled, and closed."""
    if isinstance(reply, Completed):
        return reply
    try:
        events = [event async for event in reply]
    finally:
        await reply.aclose()
    return Completed(data=assemble(kind, events), headers=reply.headers)


def assemble(kind: str, events: Sequence[Event]) -> dict[str, Any]:
    """The whole response a stream of chunks adds up to."""
    head: dict[str, Any] = {}
    usage: Any = None
    choices: dict[int, dict[str, Any]] = {}
    for event in events:
        chunk = event.json()
        for name in _HEAD_FIELDS:
            if name not in head and chunk.get(name) is not None:
                head[name] = chunk[name]
        if chunk.get("usage"):
            usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            if isinstance(choice, dict):
                _merge_choice(kind, choices, choice)
    out = {
        **head,
        "object": "chat.completion" if kind == "chat" else "text_completion",
        "choices": [_finish_choice(kind, choices[i]) for i in sorted(choices)],
    }
    if usage is not None:
        out["usage"] = usage
    return out


def _merge_choice(kind: str, choices: dict[int, dict[str, Any]], choice: dict[str, Any]) -> None:
    index = choice.get("index", 0)
    acc = choices.setdefault(index, {"index": index, "text": [], "refusal": [], "tools": {}})
    if choice.get("finish_reason") is not None:
        acc["finish_reason"] = choice["finish_reason"]
    logprobs = choice.get("logprobs")
    if isinstance(logprobs, dict):
        merged = acc.setdefault("logprobs", {})
        for name, value in logprobs.items():
            if isinstance(value, list):
                merged.setdefault(name, []).extend(value)
            else:
                merged[name] = value
    if kind != "chat":
        acc["text"].append(choice.get("text") or "")
        return
    delta = choice.get("delta") or {}
    acc.setdefault("role", delta.get("role") or "assistant")
    acc["text"].append(delta.get("content") or "")
    acc["refusal"].append(delta.get("refusal") or "")
    for call in delta.get("tool_calls") or ():
        slot = acc["tools"].setdefault(call.get("index", 0), {"arguments": []})
        for name in ("id", "type"):
            if call.get(name):
                slot[name] = call[name]
        function = call.get("function") or {}
        if function.get("name"):
            slot["name"] = function["name"]
        slot["arguments"].append(function.get("arguments") or "")


def _finish_choice(kind: str, acc: dict[str, Any]) -> dict[str, Any]:
    text = "".join(acc["text"])
    out: dict[str, Any] = {"index": acc["index"]}
    if kind == "chat":
        message: dict[str, Any] = {"role": acc.get("role", "assistant"), "content": text or None}
        if refusal := "".join(acc["refusal"]):
            message["refusal"] = refusal
        if acc["tools"]:
            message["tool_calls"] = [
                {
                    "id": slot.get("id", ""),
                    "type": slot.get("type", "function"),
                    "function": {
                        "name": slot.get("name", ""),
                        "arguments": "".join(slot["arguments"]),
                    },
                }
                for _, slot in sorted(acc["tools"].items())
            ]
        out["message"] = message
    else:
        out["text"] = text
    out["logprobs"] = acc.get("logprobs")
    out["finish_reason"] = acc.get("finish_reason")
    return out


def synthesize(kind: str, data: dict[str, Any]) -> list[Event]:
    """Well-formed stream chunks carrying a whole response, in the order providers send them."""
    head = {name: data[name] for name in _HEAD_FIELDS if data.get(name) is not None}
    head["object"] = "chat.completion.chunk" if kind == "chat" else "text_completion"
    events = [
        Event.of({**head, "choices": [part]})
        for choice in data.get("choices") or ()
        if isinstance(choice, dict)
        for part in _choice_chunks(kind, choice)
    ]
    if data.get("usage") is not None:
        events.append(Event.of({**head, "choices": [], "usage": data["usage"]}))
    return events


def _choice_chunks(kind: str, choice: dict[str, Any]) -> Iterable[dict[str, Any]]:
    index = choice.get("index", 0)
    logprobs = choice.get("logprobs")
    finish = {"index": index, "finish_reason": choice.get("finish_reason"), "logprobs": None}
    if kind != "chat":
        yield {"index": index, "text": choice.get("text") or "", "logprobs": logprobs,
               "finish_reason": None}  # fmt: skip
        yield {**finish, "text": ""}
        return
    message = choice.get("message") or {}
    role = message.get("role") or "assistant"
    yield {"index": index, "delta": {"role": role, "content": ""}, "logprobs": None,
           "finish_reason": None}  # fmt: skip
    delta: dict[str, Any] = {}
    if message.get("content"):
        delta["content"] = message["content"]
    if message.get("refusal"):
        delta["refusal"] = message["refusal"]
    if message.get("tool_calls"):
        delta["tool_calls"] = [{**call, "index": i} for i, call in enumerate(message["tool_calls"])]
    if delta or logprobs:
        yield {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": None}
    yield {**finish, "delta": {}}


def replay(entry: Entry, *, kind: str, stream: bool, headers: dict[str, str]) -> Reply:
    """The entry as the reply the client asked for (a stream or a whole answer)."""
    if entry.form is _COMPLETED:
        if not stream:
            return Completed(entry.parts[0], headers=headers)
        return as_stream(kind, parse_json(entry.parts[0]), headers=headers)
    events = [Event(part) for part in entry.parts]
    if stream:
        return Stream(_emit(events), headers=headers)
    return Completed(data=assemble(kind, events), headers=headers)


def as_stream(kind: str, data: dict[str, Any], *, headers: dict[str, str]) -> Stream:
    """A whole answer replayed as a well-formed stream (`synthesize`'s chunks)."""
    return Stream(_emit(synthesize(kind, data)), headers=headers)


async def _emit(events: Sequence[Event]) -> EventSource:
    for event in events:
        yield event
