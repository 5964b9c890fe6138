"""OpenAI chat request -> Anthropic Messages request, for `kind: anthropic` upstreams.

Where in the stack: called by `upstreams/anthropic.py` at the very bottom, so every lever above
(caches, limits, retries, routing) works on the OpenAI-shaped `Call` the edge built, whichever
protocol the client spoke. The inbound `/v1/messages` handler builds such Calls too and carries
Anthropic-only features in the OpenAI body as extensions, which are translated here:
`cache_control` on content parts, on system parts and on tools (beside `function`), `top_k`,
`thinking`, `speed` (fast mode), and `metadata.user_id`; also a top-level `cache_control`
(Anthropic's automatic breakpoint on the last block) and `is_error: true` on a `tool` message
(-> the tool_result's `is_error`).

Wire format: Anthropic Messages API reference (`POST /v1/messages`: `system` as a string or text
blocks, `messages` of `user`/`assistant` turns whose content is a string or blocks of `text`,
`image` (`source` `{type: base64, media_type, data}` or `{type: url, url}`), `tool_use`
`{id, name, input}` and `tool_result` `{tool_use_id, content, is_error}`; `tools` of
`{name, description, input_schema, cache_control}`; `tool_choice` `{type: auto|any|tool|none,
name, disable_parallel_tool_use}`; `stop_sequences`; `output_config.format` for a JSON schema),
checked against the official `anthropic` Python SDK's request types (`MessageCreateParams`).

Nothing the client asked for is silently lost. Every top-level field is in one of three sets:
translated (`_TRANSLATED`), dropped because it cannot change the answer (`_SAFE_TO_DROP`), or
refused with a 400 naming it; unknown fields are refused too. Neutral values of refusable
fields (`n: 1`, `logprobs: false`, penalties of 0, an empty `logit_bias`) pass.

    field                        what happens
    messages, model, stream      translated (system messages hoisted into `system`, in order)
    max_tokens / max_completion_tokens   -> max_tokens (default: the upstream's default_max_tokens)
    temperature (0..1), top_p, top_k     passed (temperature above 1 is a 400: Anthropic's range)
    stop                         -> stop_sequences
    tools, tool_choice, parallel_tool_calls -> tools, tool_choice (+ disable_parallel_tool_use)
    response_format              text: dropped; json_schema -> output_config.format;
                                 json_object: 400 (Anthropic needs a schema)
    reasoning_effort             low..xhigh|max -> output_config.effort; other values: 400
    thinking, cache_control, speed   passed as they are (extensions, see above)
    metadata.user_id, user       -> metadata.user_id (other metadata keys only tag stored
                                 OpenAI completions: dropped)
    stream_options               consumed (the usage chunk is always produced; the edge drops it)
    seed, store, service_tier, prompt_cache_key, safety_identifier   dropped: no effect on the
                                 answer here (Anthropic caches by `cache_control`, not by key)
    n>1, logprobs, top_logprobs, frequency/presence_penalty, logit_bias, audio, modalities
    other than text, prediction, web_search_options, functions, function_call, verbosity  400
    message `name`, image `detail`  dropped (no Anthropic field; no content is lost)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from levergate.core.json_bound import parse_json
from levergate.errors import BadRequest

_TRANSLATED = frozenset(
    {
        "model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p",
        "top_k", "stop", "stream", "stream_options", "tools", "tool_choice",
        "parallel_tool_calls", "response_format", "reasoning_effort", "thinking", "metadata",
        "user", "cache_control", "speed",
    }
)  # fmt: skip
_SAFE_TO_DROP = frozenset(
    {"seed", "store", "service_tier", "prompt_cache_key", "safety_identifier"}
)
# Refusable fields and the value that means "not used", which passes.
_NEUTRAL: dict[str, Any] = {
    "n": 1,
    "logprobs": False,
    "top_logprobs": 0,
    "frequency_penalty": 0,
    "presence_penalty": 0,
    "logit_bias": {},
    "modalities": ["text"],
}
_EFFORTS = frozenset({"low", "medium", "high", "xhigh", "max"})
_SYSTEM_ROLES = frozenset({"system", "developer"})


def to_messages_request(body: Mapping[str, Any], *, default_max_tokens: int) -> dict[str, Any]:
    """The Anthropic request for an OpenAI chat body; `BadRequest` naming the first field that
    Anthropic cannot express."""
    _check_fields(body)
    system, messages = _conversation(body["messages"])
    out: dict[str, Any] = {"model": body["model"], "messages": messages}
    if system:
        out["system"] = system
    out["max_tokens"] = _max_tokens(body, default_max_tokens)
    _sampling(body, out)
    if body.get("stream") is True:
        out["stream"] = True
    _tools(body, out)
    _output(body, out)
    for extension in ("thinking", "cache_control"):
        if isinstance(body.get(extension), Mapping):
            out[extension] = dict(body[extension])
    if isinstance(body.get("speed"), str):
        out["speed"] = body["speed"]
    user_id = _user_id(body)
    if user_id is not None:
        out["metadata"] = {"user_id": user_id}
    return out


def _check_fields(body: Mapping[str, Any]) -> None:
    for name, value in body.items():
        if name in _TRANSLATED or name in _SAFE_TO_DROP or value is None:
            continue
        if name in _NEUTRAL and value == _NEUTRAL[name]:
            continue
        raise _refuse(name, f"'{name}' cannot be expressed in Anthropic's Messages API")


def _refuse(param: str, why: str) -> BadRequest:
    return BadRequest(
        f"{why}; the model is served by an Anthropic upstream. Remove '{param}' or choose "
        "another model.",
        param=param,
        code="unsupported_by_upstream",
    )


def _max_tokens(body: Mapping[str, Any], default: int) -> int:
    for name in ("max_completion_tokens", "max_tokens"):
        value = body.get(name)
        if value is not None:
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise BadRequest(f"Invalid '{name}': expected a positive integer.", param=name)
            return value
    return default


def _sampling(body: Mapping[str, Any], out: dict[str, Any]) -> None:
    temperature = body.get("temperature")
    if temperature is not None:
        if not _number(temperature) or not 0 <= temperature <= 1:
            raise _refuse("temperature", "Anthropic takes a 'temperature' between 0 and 1")
        out["temperature"] = temperature
    for name in ("top_p", "top_k"):
        value = body.get(name)
        if value is not None:
            if not _number(value):
                raise BadRequest(f"Invalid type for '{name}': expected a number.", param=name)
            out[name] = value
    stop = body.get("stop")
    if stop is not None:
        stops = [stop] if isinstance(stop, str) else stop
        if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
            raise BadRequest("Invalid 'stop': expected a string or strings.", param="stop")
        if stops:
            out["stop_sequences"] = stops


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _user_id(body: Mapping[str, Any]) -> str | None:
    metadata = body.get("metadata")
    if isinstance(metadata, Mapping) and isinstance(metadata.get("user_id"), str):
        user_id: str = metadata["user_id"]
        return user_id
    user = body.get("user")
    return user if isinstance(user, str) else None


# -- tools -------------------------------------------------------------------------------------


def _tools(body: Mapping[str, Any], out: dict[str, Any]) -> None:
    tools = body.get("tools")
    if tools:
        if not isinstance(tools, list):
            raise BadRequest("Invalid type for 'tools': expected an array.", param="tools")
        out["tools"] = [_tool(tool, index) for index, tool in enumerate(tools)]
    choice = _tool_choice(body.get("tool_choice"))
    if body.get("parallel_tool_calls") is False:
        choice = {**(choice or {"type": "auto"}), "disable_parallel_tool_use": True}
    if choice is not None:
        out["tool_choice"] = choice


def _tool(tool: Any, index: int) -> dict[str, Any]:
    where = f"tools[{index}]"
    if not isinstance(tool, Mapping) or tool.get("type") != "function":
        raise _refuse(where, f"'{where}' is not a function tool, the only kind Anthropic takes")
    function = tool.get("function")
    if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
        raise BadRequest(f"Invalid '{where}': a function tool needs a name.", param=where)
    parameters = function.get("parameters")
    out: dict[str, Any] = {
        "name": function["name"],
        "input_schema": dict(parameters)
        if isinstance(parameters, Mapping)
        else {"type": "object", "properties": {}},
    }
    if isinstance(function.get("description"), str):
        out["description"] = function["description"]
    if isinstance(tool.get("cache_control"), Mapping):
        out["cache_control"] = dict(tool["cache_control"])
    return out


def _tool_choice(choice: Any) -> dict[str, Any] | None:
    if choice is None:
        return None
    simple = {"auto": "auto", "none": "none", "required": "any"}
    if isinstance(choice, str) and choice in simple:
        return {"type": simple[choice]}
    if isinstance(choice, Mapping) and choice.get("type") == "function":
        function = choice.get("function")
        if isinstance(function, Mapping) and isinstance(function.get("name"), str):
            return {"type": "tool", "name": function["name"]}
    raise BadRequest(
        "Invalid 'tool_choice': expected 'auto', 'none', 'required' or a named function.",
        param="tool_choice",
    )


def _output(body: Mapping[str, Any], out: dict[str, Any]) -> None:
    config: dict[str, Any] = {}
    response_format = body.get("response_format")
    if response_format is not None:
        kind = response_format.get("type") if isinstance(response_format, Mapping) else None
        if kind == "json_schema":
            schema = response_format.get("json_schema")
            if not isinstance(schema, Mapping) or not isinstance(schema.get("schema"), Mapping):
                raise BadRequest(
                    "Invalid 'response_format': json_schema needs a 'schema' object.",
                    param="response_format",
                )
            config["format"] = {"type": "json_schema", "schema": dict(schema["schema"])}
        elif kind != "text":
            raise _refuse(
                "response_format",
                f"'response_format' of type {kind!r} has no Anthropic equivalent (only "
                "'json_schema' does)",
            )
    effort = body.get("reasoning_effort")
    if effort is not None:
        if effort not in _EFFORTS:
            raise _refuse("reasoning_effort", f"'reasoning_effort' {effort!r} has no equivalent")
        config["effort"] = effort
    if config:
        out["output_config"] = config


# -- messages ----------------------------------------------------------------------------------


def _conversation(messages: Any) -> tuple[Any, list[dict[str, Any]]]:
    """(system, messages): system messages hoisted in order; consecutive tool results (and a
    user message right after them) merged into one user turn, results first, as Anthropic
    requires."""
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty array.", param="messages")
    system: list[dict[str, Any]] = []
    turns: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, Mapping):
            raise BadRequest(f"Invalid '{where}': expected an object.", param=where)
        role = message.get("role")
        if role in _SYSTEM_ROLES:
            system += _text_blocks(message.get("content"), where=where)
        elif role == "user":
            _append(turns, "user", _user_content(message.get("content"), where=where))
        elif role == "assistant":
            blocks = _assistant_content(message, where=where)
            if blocks:
                _append(turns, "assistant", blocks)
        elif role == "tool":
            _append(turns, "user", [_tool_result(message, where=where)])
        else:
            raise _refuse(f"{where}.role", f"the message role {role!r} is not expressible")
    return _system_value(system), turns


def _append(turns: list[dict[str, Any]], role: str, blocks: list[dict[str, Any]]) -> None:
    if turns and turns[-1]["role"] == role and role == "user" and _is_results(turns[-1]):
        turns[-1]["content"].extend(blocks)
        return
    turns.append({"role": role, "content": blocks})


def _is_results(turn: dict[str, Any]) -> bool:
    content = turn["content"]
    return bool(content) and content[0].get("type") == "tool_result"


def _system_value(blocks: list[dict[str, Any]]) -> Any:
    if not blocks:
        return None
    if len(blocks) == 1 and "cache_control" not in blocks[0]:
        return blocks[0]["text"]
    return blocks


def _text_blocks(content: Any, *, where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if content is None:
        return []
    if not isinstance(content, list):
        raise BadRequest(f"Invalid '{where}.content': expected a string or parts.", param=where)
    blocks = []
    for index, part in enumerate(content):
        block = _part(part, where=f"{where}.content[{index}]", images=False)
        blocks.append(block)
    return blocks


def _user_content(content: Any, *, where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list) or not content:
        raise BadRequest(f"Invalid '{where}.content': expected a string or parts.", param=where)
    return [_part(p, where=f"{where}.content[{i}]", images=True) for i, p in enumerate(content)]


def _part(part: Any, *, where: str, images: bool) -> dict[str, Any]:
    kind = part.get("type") if isinstance(part, Mapping) else None
    if kind in ("text", "refusal"):
        text = part.get(kind)
        if not isinstance(text, str):
            raise BadRequest(f"Invalid '{where}': a {kind} part needs a string.", param=where)
        block: dict[str, Any] = {"type": "text", "text": text}
    elif kind == "image_url" and images:
        block = {"type": "image", "source": _image_source(part.get("image_url"), where=where)}
    else:
        raise _refuse(where, f"a content part of type {kind!r} at '{where}' is not expressible")
    if isinstance(part.get("cache_control"), Mapping):
        block["cache_control"] = dict(part["cache_control"])
    return block


def _image_source(image: Any, *, where: str) -> dict[str, Any]:
    url = image.get("url") if isinstance(image, Mapping) else image
    if not isinstance(url, str):
        raise BadRequest(f"Invalid '{where}': an image part needs a url.", param=where)
    if url.startswith("data:"):
        header, comma, data = url[5:].partition(",")
        media_type, _, encoding = header.partition(";")
        if not comma or encoding != "base64" or not media_type.startswith("image/"):
            raise BadRequest(
                f"Invalid '{where}': a data URL must be 'data:image/<type>;base64,<data>'.",
                param=where,
            )
        return {"type": "base64", "media_type": media_type, "data": data}
    if url.startswith(("https://", "http://")):
        return {"type": "url", "url": url}
    raise BadRequest(f"Invalid '{where}': an image url must be http(s) or data.", param=where)


def _assistant_content(message: Mapping[str, Any], *, where: str) -> list[dict[str, Any]]:
    blocks = _text_blocks(message.get("content"), where=where)
    calls = message.get("tool_calls") or []
    if not isinstance(calls, list):
        raise BadRequest(f"Invalid '{where}.tool_calls': expected an array.", param=where)
    for index, call in enumerate(calls):
        at = f"{where}.tool_calls[{index}]"
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping) or not isinstance(call.get("id"), str):
            raise BadRequest(f"Invalid '{at}': expected an id and a function.", param=at)
        blocks.append(
            {
                "type": "tool_use",
                "id": call["id"],
                "name": function.get("name"),
                "input": _arguments(function.get("arguments"), where=at),
            }
        )
    if message.get("function_call") is not None:
        at = f"{where}.function_call"
        raise _refuse(at, "legacy 'function_call' messages are not expressible")
    return blocks


def _arguments(arguments: Any, *, where: str) -> dict[str, Any]:
    if arguments in (None, ""):
        return {}
    try:
        parsed = parse_json(arguments) if isinstance(arguments, str) else None
    except orjson.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, dict):
        raise BadRequest(
            f"Invalid '{where}.function.arguments': Anthropic needs a JSON object.", param=where
        )
    return parsed


def _tool_result(message: Mapping[str, Any], *, where: str) -> dict[str, Any]:
    tool_id = message.get("tool_call_id")
    if not isinstance(tool_id, str):
        raise BadRequest(f"Invalid '{where}': a tool message needs 'tool_call_id'.", param=where)
    content = message.get("content")
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": tool_id}
    if isinstance(content, str):
        block["content"] = content
    elif content is not None:
        block["content"] = _text_blocks(content, where=where)
    if message.get("is_error") is True:
        block["is_error"] = True
    return block
