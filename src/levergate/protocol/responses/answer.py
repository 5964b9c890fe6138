"""The OpenAI Responses API, answer side: a chat completion (whole or streamed) turned into a
Responses object or event stream, and the facts the gateway reads from Responses answers.

Where in the stack: `layers/responses.py` calls `response_from_chat` on a whole chat answer and
runs a translated stream through `EventWriter`; `events_of` lays a whole response out as the
event stream the API would have sent (a stored or cached answer replayed as a stream, and the
simulator's native route). Shapes follow openai-python's `types/responses` (`Response`,
`ResponseOutputMessage`, `ResponseFunctionToolCall`, `ResponseUsage`, the `Response*Event`s):

    response.created, response.in_progress,
      per item: response.output_item.added,
        message:  response.content_part.added, response.output_text.delta*,
                  response.output_text.done, response.content_part.done
        function: response.function_call_arguments.delta*, ...arguments.done
      response.output_item.done,
    response.completed | response.incomplete | response.failed

each event with a `sequence_number` that rises by one. Usage in the Responses convention:
`input_tokens` includes `input_tokens_details.cached_tokens` (as chat's `prompt_tokens` does).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from levergate.core.tokenizer import filled_flag

# Body fields echoed into the response object as the request set them (None when absent).
_ECHOED = (
    "instructions",
    "max_output_tokens",
    "previous_response_id",
    "temperature",
    "top_p",
    "user",
    "prompt_cache_key",
    "safety_identifier",
)
# Events that carry generated output: where TTFT is measured on a Responses stream.
RESPONSE_DELTAS = frozenset(
    {
        "response.output_text.delta",
        "response.refusal.delta",
        "response.function_call_arguments.delta",
    }
)
_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}


def new_id(prefix: str) -> str:
    """Unguessable: a response id is what a later request names to continue a conversation."""
    return f"{prefix}_{os.urandom(24).hex()}"


def skeleton(
    body: Mapping[str, Any], *, response_id: str, model: str, created: int | None = None
) -> dict[str, Any]:
    """The response object before any output: what `response.created` carries."""
    tools = body.get("tools")
    text = body.get("text")
    response: dict[str, Any] = {
        "id": response_id,
        "object": "response",
        "created_at": int(time.time()) if created is None else created,
        "status": "in_progress",
        "background": False,
        "error": None,
        "incomplete_details": None,
        "metadata": body.get("metadata") or {},
        "model": model,
        "output": [],
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "reasoning": {"effort": None, "summary": None},
        "store": body.get("store", True),
        "text": text
        if isinstance(text, dict) and "format" in text
        else {"format": {"type": "text"}},
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": tools if isinstance(tools, list) else [],
        "truncation": "disabled",
        "usage": None,
    }
    for name in _ECHOED:
        response[name] = body.get(name)
    return response


def usage_from_chat(usage: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if not isinstance(usage, Mapping):
        return None
    prompt = _int(usage.get("prompt_tokens"))
    completion = _int(usage.get("completion_tokens"))
    details = usage.get("prompt_tokens_details")
    cached = _int(details.get("cached_tokens")) if isinstance(details, Mapping) else 0
    out_details = usage.get("completion_tokens_details")
    reasoning = _int(out_details.get("reasoning_tokens")) if isinstance(out_details, Mapping) else 0
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": _int(usage.get("total_tokens")) or prompt + completion,
        **filled_flag(usage),  # counted by levergate (layers/usage.py): said so
    }


def finished(
    response: dict[str, Any], *, finish: str | None, usage: dict[str, Any] | None
) -> dict[str, Any]:
    """The response with its final status: `incomplete` when the output was cut short."""
    reason = _INCOMPLETE.get(finish or "")
    response["status"] = "incomplete" if reason else "completed"
    response["incomplete_details"] = {"reason": reason} if reason else None
    response["usage"] = usage
    return response


def response_from_chat(
    body: Mapping[str, Any], chat: Mapping[str, Any], *, response_id: str
) -> dict[str, Any]:
    """A whole chat completion as the Responses object answering `body`."""
    model = chat.get("model") if isinstance(chat.get("model"), str) else body.get("model")
    response = skeleton(
        body, response_id=response_id, model=str(model), created=_int(chat.get("created")) or None
    )
    choices = chat.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices else {}
    message = choice.get("message") if isinstance(choice, Mapping) else None
    message = message if isinstance(message, Mapping) else {}
    output = response["output"]
    parts: list[dict[str, Any]] = []
    if isinstance(text := message.get("content"), str) and text:
        parts.append(text_part(text))
    if isinstance(refusal := message.get("refusal"), str) and refusal:
        parts.append({"type": "refusal", "refusal": refusal})
    if parts:
        output.append(message_item(new_id("msg"), parts, status="completed"))
    calls = message.get("tool_calls")
    for call in calls if isinstance(calls, list) else ():
        function = call.get("function") if isinstance(call, Mapping) else None
        if isinstance(function, Mapping):
            output.append(
                function_item(
                    new_id("fc"),
                    call_id=str(call.get("id", "")),
                    name=str(function.get("name", "")),
                    arguments=str(function.get("arguments") or ""),
                    status="completed",
                )
            )
    finish = choice.get("finish_reason") if isinstance(choice, Mapping) else None
    return finished(response, finish=finish, usage=usage_from_chat(chat.get("usage")))


def responses_generated_text(data: Mapping[str, Any]) -> str:
    """The generated text of a Responses event (its delta) or whole response (text, refusals,
    function names and arguments): what a tokenizer counts when no usage was reported."""
    if data.get("type") in RESPONSE_DELTAS:
        delta = data.get("delta")
        return delta if isinstance(delta, str) else ""
    if data.get("object") != "response":
        return ""
    parts: list[str] = []
    for item in data.get("output") or ():
        if not isinstance(item, Mapping):
            continue
        parts.extend(v for n in ("name", "arguments") if isinstance(v := item.get(n), str))
        for part in item.get("content") or ():
            if isinstance(part, Mapping):
                parts.extend(str(part.get(k)) for k in ("text", "refusal") if part.get(k))
    return "".join(parts)


def text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def message_item(item_id: str, parts: list[dict[str, Any]], *, status: str) -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "message",
        "status": status,
        "role": "assistant",
        "content": parts,
    }


def function_item(
    item_id: str, *, call_id: str, name: str, arguments: str, status: str
) -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "function_call",
        "status": status,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
    }


def output_text(response: Mapping[str, Any]) -> str:
    """The SDK's `response.output_text`: every output_text part of every message, joined."""
    texts: list[str] = []
    for item in response.get("output") or ():
        if isinstance(item, Mapping) and item.get("type") == "message":
            texts.extend(
                str(part.get("text", ""))
                for part in item.get("content") or ()
                if isinstance(part, Mapping) and part.get("type") == "output_text"
            )
    return "".join(texts)


def events_of(
    response: Mapping[str, Any], *, split: Callable[[str], Sequence[str]] | None = None
) -> Iterator[dict[str, Any]]:
    """The event stream that delivers `response`; `split` cuts a text into its deltas (by
    default one delta per part)."""
    pieces = split or _whole
    seq = iter(range(1 << 62))
    opening = {
        **response,
        "status": "in_progress",
        "output": [],
        "usage": None,
        "incomplete_details": None,
    }
    yield {"type": "response.created", "response": opening, "sequence_number": next(seq)}
    yield {"type": "response.in_progress", "response": opening, "sequence_number": next(seq)}
    for index, item in enumerate(response.get("output") or ()):
        yield from _item_events(item, index, seq, pieces)
    final = (
        "response.incomplete" if response.get("status") == "incomplete" else "response.completed"
    )
    if response.get("status") == "failed":
        final = "response.failed"
    yield {"type": final, "response": dict(response), "sequence_number": next(seq)}


def _item_events(
    item: Mapping[str, Any], index: int, seq: Iterator[int], pieces: Callable[[str], Sequence[str]]
) -> Iterator[dict[str, Any]]:
    if item.get("type") == "message":
        yield {"type": "response.output_item.added", "output_index": index,
               "item": {**item, "status": "in_progress", "content": []},
               "sequence_number": next(seq)}  # fmt: skip
        for c, part in enumerate(item.get("content") or ()):
            yield from _part_events(item, index, c, part, seq=seq, pieces=pieces)
    elif item.get("type") == "function_call":
        base = {"item_id": item.get("id"), "output_index": index}
        yield {"type": "response.output_item.added", "output_index": index,
               "item": {**item, "status": "in_progress", "arguments": ""},
               "sequence_number": next(seq)}  # fmt: skip
        arguments = str(item.get("arguments", ""))
        for delta in pieces(arguments) if arguments else ():
            yield {"type": "response.function_call_arguments.delta", **base, "delta": delta,
                   "sequence_number": next(seq)}  # fmt: skip
        yield {"type": "response.function_call_arguments.done", **base, "name": item.get("name"),
               "arguments": arguments, "sequence_number": next(seq)}  # fmt: skip
    else:
        yield {"type": "response.output_item.added", "output_index": index, "item": dict(item),
               "sequence_number": next(seq)}  # fmt: skip
    yield {"type": "response.output_item.done", "output_index": index, "item": dict(item),
           "sequence_number": next(seq)}  # fmt: skip


def _part_events(
    item: Mapping[str, Any],
    index: int,
    c: int,
    part: Mapping[str, Any],
    *,
    seq: Iterator[int],
    pieces: Callable[[str], Sequence[str]],
) -> Iterator[dict[str, Any]]:
    base = {"item_id": item.get("id"), "output_index": index, "content_index": c}
    field = "text" if part.get("type") == "output_text" else "refusal"
    kind = "output_text" if field == "text" else "refusal"
    yield {"type": "response.content_part.added", **base, "part": {**part, field: ""},
           "sequence_number": next(seq)}  # fmt: skip
    whole = str(part.get(field, ""))
    extra: dict[str, Any] = {"logprobs": []} if kind == "output_text" else {}
    for delta in pieces(whole) if whole else ():
        yield {"type": f"response.{kind}.delta", **base, "delta": delta, **extra,
               "sequence_number": next(seq)}  # fmt: skip
    yield {"type": f"response.{kind}.done", **base, field: whole, **extra,
           "sequence_number": next(seq)}  # fmt: skip
    yield {"type": "response.content_part.done", **base, "part": dict(part),
           "sequence_number": next(seq)}  # fmt: skip


def _whole(text: str) -> list[str]:
    return [text]


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
