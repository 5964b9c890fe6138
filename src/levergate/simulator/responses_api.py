"""The simulator's native OpenAI Responses API: `POST /v1/responses` (whole and streamed),
`GET` and `DELETE /v1/responses/{id}`, so the gateway's pass-through path is tested without a
network, next to its translation to chat completions.

What it models, as the provider does: `instructions` and the conversation before it
(`previous_response_id`, remembered per API key, bounded, `store: false` remembered not at all),
the prompt cache (the conversation renders prefix-stably, so a continued one hits it and
reports `input_tokens_details.cached_tokens`), function calls (when function tools are given
and `tool_choice` forces one, or the last user text names one: arguments built from the
tool's JSON schema), structured output (`text.format` json_schema / json_object: a JSON
document that fits the schema), `max_output_tokens` ending as `incomplete`. The words are the
simulator's deterministic ones (tokens.py), so the same request gets the same answer.

Pure apart from `Memory`: the Simulator admits, caches and paces; this module turns a checked
request into the response object and lays it out as a `Reply`.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from levergate.protocol.responses.answer import (
    events_of,
    finished,
    function_item,
    message_item,
    skeleton,
    text_part,
)
from levergate.simulator import tokens
from levergate.simulator.responses import Reply, SimError

_MAX_REMEMBERED = 10_000  # responses kept for previous_response_id / GET, oldest dropped first
_SSE = "text/event-stream; charset=utf-8"


@dataclass(slots=True)
class Remembered:
    key: str
    conversation: str  # the rendered conversation up to and including this response
    response: dict[str, Any]


class Memory:
    """Stored responses by id, scoped to the API key that made them (another key's id is
    unknown, as another organisation's is at OpenAI)."""

    def __init__(self, *, limit: int = _MAX_REMEMBERED) -> None:
        self._items: collections.OrderedDict[str, Remembered] = collections.OrderedDict()
        self._limit = limit

    def get(self, response_id: str, *, key: str) -> Remembered | None:
        found = self._items.get(response_id)
        return found if found is not None and found.key == key else None

    def put(self, response_id: str, remembered: Remembered) -> None:
        self._items[response_id] = remembered
        while len(self._items) > self._limit:
            self._items.popitem(last=False)

    def pop(self, response_id: str, *, key: str) -> bool:
        if self.get(response_id, key=key) is None:
            return False
        del self._items[response_id]
        return True


@dataclass(slots=True)
class Plan:
    """A checked request: what to generate."""

    body: dict[str, Any]
    prompt: str  # the whole rendered conversation, this turn's input included
    conversation: str  # the same without tools and instructions (not carried to the next turn)
    prompt_tokens: int
    output_tokens: int
    finish: str  # "stop" or "length"
    tool: dict[str, Any] | None  # the function tool to call, or None for text


def check(body: Any) -> dict[str, Any]:
    if type(body) is not dict:
        raise SimError(400, "The request body must be a JSON object.")
    for name in ("model", "input"):
        if body.get(name) is None:
            raise SimError(400, f"Missing required parameter: '{name}'.", param=name)
    if type(body["model"]) is not str:
        raise SimError(400, "Invalid type for 'model': expected a string.", param="model")
    if not isinstance(body["input"], (str, list)):
        raise SimError(400, "Invalid type for 'input': expected a string or array.", param="input")
    if body.get("stream") not in (None, True, False):
        raise SimError(400, "Invalid type for 'stream': expected a boolean.", param="stream")
    return body


def render_turn(body: Mapping[str, Any]) -> str:
    """This turn's input, rendered canonically (appending turns only appends text)."""
    items = body["input"]
    if isinstance(items, str):
        return f"user: {items}\n"
    parts = []
    for item in items:
        if not isinstance(item, dict):
            raise SimError(400, "Invalid 'input': each item must be an object.", param="input")
        parts.append(_render_item(item))
    return "".join(parts)


def _render_item(item: Mapping[str, Any]) -> str:
    kind = item.get("type", "message")
    if kind == "message":
        return f"{item.get('role')}: {_text(item.get('content'))}\n"
    if kind == "function_call":
        return f"call {item.get('name')}({item.get('arguments')})\n"
    if kind == "function_call_output":
        return f"result {item.get('call_id')}: {_text(item.get('output'))}\n"
    return orjson.dumps(item, option=orjson.OPT_SORT_KEYS).decode() + "\n"


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def plan(
    body: dict[str, Any], *, history: str, default_tokens: int, max_tokens: int, natural: int | None
) -> Plan:
    head = ""
    if tools := body.get("tools"):
        head = orjson.dumps(tools, option=orjson.OPT_SORT_KEYS).decode() + "\n"
    if isinstance(instructions := body.get("instructions"), str):
        head += f"system: {instructions}\n"
    turn = render_turn(body)
    # Tools and instructions first (they come first at the provider), then the conversation.
    prompt = head + history + turn
    cap = body.get("max_output_tokens")
    if cap is not None and (type(cap) is not int or not 16 <= cap <= max_tokens):
        raise SimError(
            400, f"Invalid 'max_output_tokens': must be an integer between 16 and {max_tokens}.",
            param="max_output_tokens", code="integer_out_of_range",
        )  # fmt: skip
    wanted = natural if natural is not None else default_tokens
    output, finish = (cap, "length") if cap is not None and wanted > cap else (wanted, "stop")
    tool = _tool_to_call(body, turn)
    return Plan(body, prompt, history + turn, tokens.count_tokens(prompt), output, finish, tool)


def _tool_to_call(body: Mapping[str, Any], turn: str) -> dict[str, Any] | None:
    tools = [
        t for t in body.get("tools") or () if isinstance(t, dict) and t.get("type") == "function"
    ]
    choice = body.get("tool_choice", "auto")
    if not tools or choice == "none" or turn.startswith("result "):
        return None
    if isinstance(choice, dict) and choice.get("type") == "function":
        return next((t for t in tools if t.get("name") == choice.get("name")), None)
    if choice == "required":
        return tools[0]
    lowered = turn.lower()
    return next((t for t in tools if str(t.get("name", "")).lower() in lowered), None)


def respond(
    p: Plan, *, response_id: str, created: int, seed: int, cached: int, previous: str | None
) -> tuple[dict[str, Any], list[str]]:
    """(the response object, the tokens of its text for streaming)."""
    body = p.body
    response = skeleton(body, response_id=response_id, model=body["model"], created=created)
    response["previous_response_id"] = previous
    words = tokens.words(seed=seed, text=p.prompt, salt=f"{body['model']}|r", count=p.output_tokens)
    stem = response_id.removeprefix("resp_")
    if p.tool is not None:
        arguments = orjson.dumps(tokens.schema_value(p.tool.get("parameters"), words)).decode()
        name = str(p.tool.get("name", ""))
        item = function_item(f"fc_{stem}", call_id=f"call_{stem}", name=name, arguments=arguments,
                             status="completed")  # fmt: skip
        output_tokens, finish, deltas = tokens.count_tokens(arguments), "stop", [arguments]
    else:
        text, deltas = _text_output(body.get("text"), words)
        item = message_item(f"msg_{stem}", [text_part(text)], status="completed")
        output_tokens, finish = p.output_tokens, p.finish
    response["output"] = [item]
    usage = {
        "input_tokens": p.prompt_tokens,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": p.prompt_tokens + output_tokens,
    }
    return finished(response, finish=finish, usage=usage), deltas


def _text_output(config: Any, words: list[str]) -> tuple[str, list[str]]:
    form = config.get("format") if isinstance(config, dict) else None
    kind = form.get("type") if isinstance(form, dict) else "text"
    if kind == "json_schema" and isinstance(form, dict):
        text = orjson.dumps(tokens.schema_value(form.get("schema"), words)).decode()
        return text, [text]
    if kind == "json_object":
        text = orjson.dumps({"answer": "".join(words).strip()}).decode()
        return text, [text]
    return "".join(words), words


def layout(
    response: dict[str, Any], deltas: list[str], *, stream: bool, delays: list[float] | None
) -> Reply:
    """The whole response, or its event stream (one delta per output token, paced by `delays`,
    indexed by token: TTFT before the first delta, one gap before each later one)."""
    if not stream:
        return Reply(status=200, body=orjson.dumps(response))
    joined = "".join(deltas)

    def split(text: str) -> list[str]:
        return deltas if text == joined else [text]

    events, waits = [], []
    token = 0
    for event in events_of(response, split=split):
        wait = 0.0
        if event["type"].endswith(".delta") and delays is not None:
            wait = delays[token] if token < len(delays) else 0.0
            token += 1
        data = orjson.dumps(event)
        events.append(b"event: " + event["type"].encode() + b"\ndata: " + data + b"\n\n")
        waits.append(wait)
    return Reply(status=200, content_type=_SSE, events=events,
                 event_delays=waits if delays is not None else None)  # fmt: skip


def remembered(p: Plan, response: dict[str, Any], *, key: str) -> Remembered:
    """What a later turn continues from: the conversation with this response's output."""
    said = "".join(_render_item({"role": "assistant", **item}) for item in response["output"])
    return Remembered(key=key, conversation=p.conversation + said, response=response)


def not_found(response_id: str, *, param: str | None = None) -> SimError:
    what = "Previous response" if param else "Response"
    return SimError(404, f"{what} with id '{response_id}' not found.", param=param,
                    code="previous_response_not_found" if param else None)  # fmt: skip
