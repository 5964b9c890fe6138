"""The OpenAI Responses API, request side: checking a `/v1/responses` body and translating it
to a chat-completions body, for upstreams that serve only chat completions.

Where in the stack: `layers/responses.py` (the bridge under Authenticate) calls `check` on every
Responses call, and `to_chat` when the call is translated; the answer goes back through
`protocol/responses/answer.py`. A request passed through natively is only checked here (types,
bounded counts), never rewritten.

What chat completions cannot express is refused with a 400 naming the field or item — built-in
tools (web_search, file_search, computer_use, ...), `reasoning` and `item_reference` items,
audio and file inputs, `background`, `include`, `truncation: auto`, reusable `prompt`s —
never dropped silently: a dropped tool or input would change the answer without a word.
Wire shapes follow openai-python's `types/responses` (`ResponseInputItemParam`,
`FunctionToolParam`, `ResponseTextConfigParam`) and OpenAI's API reference.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from levergate.config import ResponsesSettings
from levergate.errors import BadRequest
from levergate.protocol.openai.body import TEXT_SEPARATOR, joined_text

# Body fields a translated request may carry, and how each is handled. Any other field is a 400:
# what is not understood is not sent on silently changed.
_PASSED = ("temperature", "top_p", "user", "prompt_cache_key", "service_tier", "safety_identifier")
_HANDLED = frozenset(
    {
        "model",
        "input",
        "instructions",
        "tools",
        "tool_choice",
        "previous_response_id",
        "store",
        "text",
        "max_output_tokens",
        "metadata",
        "parallel_tool_calls",
        "stream",
        "reasoning",
        "truncation",
        "stream_options",
        *_PASSED,
    }
)
# Refused when translating, with the reason the client reads.
_UNTRANSLATABLE = {
    "background": "background responses need an upstream that serves the Responses API",
    "include": "extra output data needs an upstream that serves the Responses API",
    "prompt": "reusable prompts live at OpenAI; send the input instead",
    "conversation": "the Conversations API needs an upstream that serves it; use "
    "previous_response_id",
    "max_tool_calls": "chat completions cannot bound built-in tool calls",
    "top_logprobs": "logprobs are not translated to chat completions",
}
_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}


def check(body: Mapping[str, Any], *, settings: ResponsesSettings) -> None:
    """The checks both paths share: what the gateway itself reads, bounded. Raise BadRequest."""
    items = body.get("input")
    if items is None:
        raise BadRequest("Missing required parameter: 'input'.", param="input")
    if not isinstance(items, (str, list)):
        raise BadRequest(
            "Invalid type for 'input': expected a string or an array of items.", param="input"
        )
    if isinstance(items, list) and len(items) > settings.max_input_items:
        raise BadRequest(
            f"Invalid 'input': {len(items)} items is more than the limit of "
            f"{settings.max_input_items} per request.",
            param="input",
            code="array_above_max_length",
        )
    for index, item in enumerate(items if isinstance(items, list) else ()):
        _check_item(item, f"input[{index}]")
    for name in ("instructions", "previous_response_id"):
        if (value := body.get(name)) is not None and not isinstance(value, str):
            raise BadRequest(f"Invalid type for '{name}': expected a string.", param=name)
    previous = body.get("previous_response_id")
    if isinstance(previous, str) and not 0 < len(previous) <= settings.max_id_chars:
        raise BadRequest("Invalid 'previous_response_id'.", param="previous_response_id")
    for name in ("store", "parallel_tool_calls", "background"):
        if (value := body.get(name)) is not None and not isinstance(value, bool):
            raise BadRequest(f"Invalid type for '{name}': expected a boolean.", param=name)
    if (text := body.get("text")) is not None and not isinstance(text, dict):
        raise BadRequest("Invalid type for 'text': expected an object.", param="text")


def _check_item(item: Any, where: str) -> None:
    """Every item an object with a type or a role, and a role the API knows: the shape both
    paths rely on (a native upstream judges the rest)."""
    if not isinstance(item, dict):
        raise BadRequest(f"Invalid '{where}': each item must be an object.", param=where)
    role, kind = item.get("role"), item.get("type")
    if role is None and not isinstance(kind, str):
        raise BadRequest(f"Invalid '{where}': an item needs a 'type' or a 'role'.", param=where)
    if role is not None and role not in _ROLES:
        raise BadRequest(
            f"Invalid '{where}.role': expected one of user, assistant, system, developer.",
            param=f"{where}.role",
        )


def to_chat(body: Mapping[str, Any], *, history: list[dict[str, Any]]) -> dict[str, Any]:
    """The chat-completions body for a Responses request whose earlier conversation (the input
    and output items of the response `previous_response_id` names, and of its ancestors) is
    `history`. Instructions are not carried over from earlier turns, as at OpenAI."""
    for name in body:
        if name in _UNTRANSLATABLE and body[name] not in (None, False, [], {}):
            raise _cannot(name, _UNTRANSLATABLE[name])
        if name not in _HANDLED and name not in _UNTRANSLATABLE:
            raise BadRequest(f"Unknown parameter: '{name}'.", param=name, code="unknown_parameter")
    if body.get("truncation") not in (None, "disabled"):
        raise _cannot("truncation", "chat completions cannot drop items to fit the context")
    messages: list[dict[str, Any]] = []
    if isinstance(instructions := body.get("instructions"), str) and instructions:
        messages.append({"role": "system", "content": instructions})
    for index, item in enumerate([*history, *input_items(body["input"])]):
        _add_item(messages, item, where=f"input[{index - len(history)}]")
    if not messages:
        raise BadRequest("'input' must contain at least one item.", param="input")
    chat: dict[str, Any] = {"model": body["model"], "messages": messages}
    for name in _PASSED:
        if body.get(name) is not None:
            chat[name] = body[name]
    if (cap := body.get("max_output_tokens")) is not None:
        chat["max_tokens"] = cap
    if isinstance(tools := body.get("tools"), list) and tools:
        chat["tools"] = [_tool(tool, index) for index, tool in enumerate(tools)]
        if isinstance(parallel := body.get("parallel_tool_calls"), bool):
            chat["parallel_tool_calls"] = parallel
    if (choice := body.get("tool_choice")) is not None:
        chat["tool_choice"] = _tool_choice(choice)
    _add_text_config(chat, body.get("text"))
    _add_reasoning(chat, body.get("reasoning"))
    if body.get("stream") is True:
        # The bridge reads usage from the chat stream's last chunk to report it in
        # `response.completed`, so it is always asked for.
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}
    return chat


def input_items(value: Any) -> list[dict[str, Any]]:
    """`input` as a list of items: a string is one user message."""
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    items: list[dict[str, Any]] = []
    for index, item in enumerate(value):
        if not isinstance(item, dict):
            raise BadRequest(
                f"Invalid 'input[{index}]': each item must be an object.", param=f"input[{index}]"
            )
        items.append(item)
    return items


def _cannot(param: str, why: str) -> BadRequest:
    return BadRequest(
        f"'{param}' cannot be translated to chat completions for this model's upstream: {why}.",
        param=param,
        code="unsupported_parameter",
    )


def _add_item(messages: list[dict[str, Any]], item: dict[str, Any], *, where: str) -> None:
    kind = item.get("type", "message" if "role" in item else None)
    if kind == "message":
        messages.append(_message(item, where=where))
    elif kind == "function_call":
        call = {
            "id": _string(item, "call_id", where),
            "type": "function",
            "function": {
                "name": _string(item, "name", where),
                "arguments": _string(item, "arguments", where),
            },
        }
        last = messages[-1] if messages else None
        # Consecutive calls (and a call right after the assistant's text) are one chat turn.
        if last is not None and last["role"] == "assistant":
            last.setdefault("tool_calls", []).append(call)
        else:
            # "" beside tool calls, not null: llama.cpp's Python server answers null with a 500.
            messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
    elif kind == "function_call_output":
        output = item.get("output")
        if isinstance(output, list):
            output = _text_of(output, where=f"{where}.output", role="tool")
        if not isinstance(output, str):
            raise BadRequest(
                f"Invalid '{where}.output': expected a string.", param=f"{where}.output"
            )
        messages.append(
            {"role": "tool", "tool_call_id": _string(item, "call_id", where), "content": output}
        )
    elif isinstance(kind, str):
        raise BadRequest(
            f"Input items of type '{kind}' ({where}) cannot be translated to chat completions "
            "for this model's upstream; only message, function_call and function_call_output "
            "items can.",
            param=where,
            code="unsupported_input_item",
        )
    else:
        raise BadRequest(f"Invalid '{where}': an item needs a 'type' or a 'role'.", param=where)


def _message(item: dict[str, Any], *, where: str) -> dict[str, Any]:
    asked = item.get("role")
    role = _ROLES.get(asked) if isinstance(asked, str) else None
    if role is None:
        raise BadRequest(
            f"Invalid '{where}.role': expected one of user, assistant, system, developer.",
            param=f"{where}.role",
        )
    content = item.get("content")
    if isinstance(content, str):
        return {"role": role, "content": content}
    if not isinstance(content, list):
        raise BadRequest(
            f"Invalid '{where}.content': expected a string or an array of parts.",
            param=f"{where}.content",
        )
    if role != "user":  # chat takes only text from system and assistant turns
        return {"role": role, "content": _text_of(content, where=f"{where}.content", role=role)}
    parts = [_part(p, where=f"{where}.content[{i}]") for i, p in enumerate(content)]
    return {"role": role, "content": joined_text(parts)}


def _part(part: Any, *, where: str) -> dict[str, Any]:
    kind = part.get("type") if isinstance(part, dict) else None
    if kind in ("input_text", "output_text", "text"):
        return {"type": "text", "text": _string(part, "text", where)}
    if kind == "input_image":
        url = part.get("image_url")
        if not isinstance(url, str):
            raise _cannot(
                f"{where}.file_id",
                "images must be sent as image_url (a URL or a "
                "data: URL); OpenAI file ids need the Responses API",
            )
        image: dict[str, Any] = {"url": url}
        if isinstance(detail := part.get("detail"), str):
            image["detail"] = detail
        return {"type": "image_url", "image_url": image}
    if isinstance(kind, str):
        raise BadRequest(
            f"Content parts of type '{kind}' ({where}) cannot be translated to chat completions "
            "for this model's upstream; only input_text and input_image parts can.",
            param=where,
            code="unsupported_content_part",
        )
    raise BadRequest(f"Invalid '{where}': a content part needs a 'type'.", param=where)


def _text_of(parts: list[Any], *, where: str, role: str) -> str:
    """The text of a turn that chat takes as a string only. An assistant's output_text parts
    are one answer cut in pieces (joined as they are); other parts are separate inputs, joined
    as a user turn's are (`joined_text`)."""
    texts = []
    for index, part in enumerate(parts):
        converted = _part(part, where=f"{where}[{index}]") if not _refusal(part) else None
        if converted is None:
            texts.append(str(part.get("refusal", "")))
        elif converted["type"] == "text":
            texts.append(converted["text"])
        else:
            raise BadRequest(
                f"Invalid '{where}[{index}]': {role} turns can carry only text.",
                param=f"{where}[{index}]",
            )
    return ("" if role == "assistant" else TEXT_SEPARATOR).join(texts)


def _refusal(part: Any) -> bool:
    return isinstance(part, dict) and part.get("type") == "refusal"


def _string(item: Mapping[str, Any], name: str, where: str) -> str:
    value = item.get(name)
    if not isinstance(value, str):
        raise BadRequest(f"Invalid '{where}.{name}': expected a string.", param=f"{where}.{name}")
    return value


def _tool(tool: Any, index: int) -> dict[str, Any]:
    where = f"tools[{index}]"
    kind = tool.get("type") if isinstance(tool, dict) else None
    if kind != "function":
        raise _cannot(
            f"{where}.type",
            f"built-in tools ('{kind}') are run by OpenAI; only function tools are translated",
        )
    function: dict[str, Any] = {"name": _string(tool, "name", where)}
    for name in ("description", "parameters", "strict"):
        if tool.get(name) is not None:
            function[name] = tool[name]
    return {"type": "function", "function": function}


def _tool_choice(choice: Any) -> Any:
    if choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function":
        return {"type": "function", "function": {"name": _string(choice, "name", "tool_choice")}}
    raise _cannot("tool_choice", "only auto, none, required and a function are translated")


def _add_text_config(chat: dict[str, Any], text: Any) -> None:
    if not isinstance(text, dict):
        return
    for name in text:
        if name not in ("format", "verbosity"):
            raise BadRequest(f"Unknown parameter: 'text.{name}'.", param=f"text.{name}")
    if isinstance(verbosity := text.get("verbosity"), str):
        chat["verbosity"] = verbosity
    form = text.get("format")
    if form is None:
        return
    kind = form.get("type") if isinstance(form, dict) else None
    if kind == "text":
        return
    if kind == "json_object":
        chat["response_format"] = {"type": "json_object"}
        return
    if kind != "json_schema":
        raise BadRequest(
            "Invalid 'text.format.type': expected text, json_object or json_schema.",
            param="text.format.type",
        )
    schema = {"name": _string(form, "name", "text.format")}
    if not isinstance(form.get("schema"), dict):
        raise BadRequest(
            "Invalid 'text.format.schema': expected an object.", param="text.format.schema"
        )
    for name in ("schema", "description", "strict"):
        if form.get(name) is not None:
            schema[name] = form[name]
    chat["response_format"] = {"type": "json_schema", "json_schema": schema}


def _add_reasoning(chat: dict[str, Any], reasoning: Any) -> None:
    if reasoning is None:
        return
    if not isinstance(reasoning, dict):
        raise BadRequest("Invalid type for 'reasoning': expected an object.", param="reasoning")
    for name, value in reasoning.items():
        if name == "effort":
            if value is not None:
                chat["reasoning_effort"] = value
        elif value is not None:
            raise _cannot(
                f"reasoning.{name}",
                "reasoning summaries need an upstream that serves the Responses API",
            )
