"""An Anthropic Messages request as the pipeline's OpenAI-shaped chat body.

Where in the stack: at the edge only (`server/handlers/anthropic.py`), before `make_call`; every
layer below sees an ordinary chat `Call`, so caches, limits, retries, routing and fallbacks
apply unchanged. What the OpenAI chat API cannot say travels as an extension recorded on the
call (`protocol/anthropic/extensions.py`): an Anthropic upstream reads it back, an
OpenAI-compatible one drops the hints and refuses the rest with a 400 naming it.

The request shape is Anthropic's (https://docs.anthropic.com/en/api/messages, and the SDK's
`MessageCreateParams` in anthropic 2.15):

    system            string or text blocks        -> a `system` message (parts keep cache_control)
    messages[].content string or blocks:
      text             -> text part                   image (base64 | url) -> image_url part
      tool_use         -> assistant `tool_calls`      tool_result -> a `role: tool` message each
      document, thinking, redacted_thinking, search_result, server tool blocks -> verbatim parts
    tools             custom (name, input_schema)  -> function tools; server tools verbatim
    tool_choice       auto | any | tool | none     -> auto | required | function | none
                      disable_parallel_tool_use    -> parallel_tool_calls: false
    stop_sequences -> stop; max_tokens (required, as Anthropic does); temperature; top_p;
    top_k; stream; metadata.user_id -> user; thinking (enabled / adaptive; disabled is nothing)
    output_config     format (json_schema)         -> response_format json_schema (strict)
                      effort                       -> reasoning_effort
    cache_control     top level (automatic caching) -> a hint at the top level
    speed             fast -> an extension (standard is nothing)

Anything else is a 400 naming the field in Anthropic's dotted style (`messages.0.content.1.type`):
a part levergate would otherwise drop is never dropped. Counts are bounded before any work
proportional to them (`RequestLimitsSettings`: messages, tools, stop sequences, content blocks).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from levergate.config import RequestLimitsSettings
from levergate.errors import BadRequest
from levergate.protocol.anthropic import extensions as ext

# Anthropic blocks with no OpenAI equivalent: carried verbatim (an extension each).
VERBATIM_BLOCKS = frozenset(
    {"document", "thinking", "redacted_thinking", "search_result", "server_tool_use",
     "web_search_tool_result", "web_fetch_tool_result", "code_execution_tool_result",
     "bash_code_execution_tool_result", "text_editor_code_execution_tool_result",
     "tool_search_tool_result", "mcp_tool_use", "mcp_tool_result", "container_upload"}
)  # fmt: skip
_TOP = frozenset(
    {"model", "messages", "max_tokens", "system", "metadata", "stop_sequences", "stream",
     "temperature", "top_k", "top_p", "tools", "tool_choice", "thinking", "service_tier",
     "output_config", "cache_control", "speed"}
)  # fmt: skip
# `output_config.effort`: Anthropic's levels, carried as OpenAI's `reasoning_effort`.
_EFFORTS = frozenset({"low", "medium", "high", "xhigh", "max"})
# The name OpenAI's `json_schema` needs and Anthropic's `output_config.format` does not have.
SCHEMA_NAME = "output"
_KEYS = {
    "text": frozenset({"type", "text", "cache_control", "citations"}),
    "image": frozenset({"type", "source", "cache_control"}),
    "tool_use": frozenset({"type", "id", "name", "input", "cache_control"}),
    "tool_result": frozenset({"type", "tool_use_id", "content", "is_error", "cache_control"}),
}
_TOOL_KEYS = frozenset({"type", "name", "description", "input_schema", "cache_control", "strict"})
_CHOICES = {"auto": "auto", "any": "required", "none": "none"}


@dataclass(frozen=True, slots=True)
class Translated:
    body: dict[str, Any]
    extensions: frozenset[str]


def to_openai(body: Any, *, limits: RequestLimitsSettings, counting: bool = False) -> Translated:
    """The OpenAI chat body for an Anthropic Messages request (`counting`: a count_tokens
    request, which has no max_tokens), or a `BadRequest` naming what is wrong."""
    return _Translation(limits).run(body, counting=counting)


def _fail(param: str, message: str) -> BadRequest:
    return BadRequest(f"{param}: {message}", param=param)


def _typed(value: Any, kind: type | tuple[type, ...], param: str, what: str) -> Any:
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise _fail(param, f"Input should be {what}")
    return value


def _text(value: Any, param: str) -> str:
    text: str = _typed(value, str, param, "a valid string")
    return text


class _Translation:
    """One request's translation: the extensions it uses and the blocks it counted."""

    def __init__(self, limits: RequestLimitsSettings) -> None:
        self._limits = limits
        self._used: set[str] = set()
        self._blocks = 0

    def run(self, body: Any, *, counting: bool) -> Translated:
        if not isinstance(body, dict):
            raise BadRequest("The request body must be a JSON object.")
        for name in body:
            if name not in _TOP:
                raise _fail(name, "levergate does not translate this field")
        out: dict[str, Any] = {"model": _text(_required(body, "model"), "model")}
        messages = self._system(body.get("system"))
        messages += self._messages(_required(body, "messages"))
        limit = self._limits.max_messages
        if len(messages) > limit:  # tool results and the system prompt become messages of their own
            raise _fail("messages", f"{len(messages)} messages once translated (tool results and "
                        f"the system prompt count) is more than the limit of {limit}")  # fmt: skip
        out["messages"] = messages
        if not counting:
            out["max_tokens"] = self._max_tokens(_required(body, "max_tokens"))
        self._sampling(body, out)
        self._output(body, out)
        self._tools(body, out)
        if body.get("stream") is not None and _typed(body["stream"], bool, "stream", "a bool"):
            out["stream"] = True
            out["stream_options"] = {"include_usage": True}
        return Translated(out, frozenset(self._used))

    # ---- system and messages -----------------------------------------------------------

    def _system(self, system: Any) -> list[dict[str, Any]]:
        if system is None or system == "":
            return []
        if isinstance(system, str):
            return [{"role": "system", "content": system}]
        blocks = _typed(system, list, "system", "a valid string or list of text blocks")
        parts = []
        for i, block in enumerate(blocks):
            where = f"system.{i}"
            if not isinstance(block, dict) or block.get("type") != "text":
                raise _fail(f"{where}.type", "system blocks must be text blocks")
            self._count()
            parts.append(self._text_part(block, where))
        return [{"role": "system", "content": self._collapsed(parts)}] if parts else []

    def _messages(self, messages: Any) -> list[dict[str, Any]]:
        _typed(messages, list, "messages", "a valid list")
        if not messages:
            raise _fail("messages", "List should have at least 1 item")
        limit = self._limits.max_messages
        if len(messages) > limit:
            raise _fail("messages", f"{len(messages)} messages is more than the limit of {limit}")
        out: list[dict[str, Any]] = []
        last = len(messages) - 1
        for i, message in enumerate(messages):
            where = f"messages.{i}"
            _typed(message, dict, where, "an object")
            role = message.get("role")
            if role not in ("user", "assistant"):
                raise _fail(f"{where}.role", "Input should be 'user' or 'assistant'")
            content = _required(message, "content", where)
            if isinstance(content, str):
                out.append({"role": role, "content": content})
                continue
            _typed(content, list, f"{where}.content", "a valid string or list of blocks")
            if not content:
                if role == "assistant" and i == last and i > 0:
                    continue  # an empty final assistant turn asks for nothing
                raise _fail(f"{where}.content", "all messages must have non-empty content")
            if role == "user":
                out += self._user(content, f"{where}.content")
            else:
                out.append(self._assistant(content, f"{where}.content"))
        return out

    def _count(self, n: int = 1) -> None:
        self._blocks += n
        limit = self._limits.max_content_blocks
        if self._blocks > limit:
            raise _fail("messages", f"more than the limit of {limit} content blocks per request")

    def _user(self, blocks: list[Any], where: str) -> list[dict[str, Any]]:
        """Tool results first (each a `role: tool` message, in order), then the rest."""
        tools: list[dict[str, Any]] = []
        parts: list[dict[str, Any]] = []
        for i, block in enumerate(blocks):
            kind = _kind(block, f"{where}.{i}")
            if kind == "tool_result":
                tools.append(self._tool_result(block, f"{where}.{i}"))
            else:
                parts.append(self._part(block, kind, f"{where}.{i}"))
        if parts:
            tools.append({"role": "user", "content": self._collapsed(parts)})
        return tools

    def _assistant(self, blocks: list[Any], where: str) -> dict[str, Any]:
        parts: list[dict[str, Any]] = []
        calls: list[dict[str, Any]] = []
        for i, block in enumerate(blocks):
            kind = _kind(block, f"{where}.{i}")
            if kind == "tool_use":
                calls.append(self._tool_use(block, f"{where}.{i}"))
            elif kind in ("image", "tool_result"):
                raise _fail(f"{where}.{i}.type", f"'{kind}' blocks belong in user messages")
            else:
                parts.append(self._part(block, kind, f"{where}.{i}"))
        # "" beside tool calls, not null: what every OpenAI-compatible server takes (llama.cpp's
        # Python server answers a null content with a 500).
        message: dict[str, Any] = {"role": "assistant", "content": self._collapsed(parts) or ""}
        if calls:
            message["tool_calls"] = calls
        return message

    def _part(self, block: dict[str, Any], kind: str, where: str) -> dict[str, Any]:
        self._count()
        if kind == "text":
            return self._text_part(block, where)
        if kind == "image":
            return self._image(block, where)
        if kind in VERBATIM_BLOCKS:
            self._used.add(kind)
            return block
        raise _fail(f"{where}.type", f"unknown or misplaced content block type '{kind}'")

    def _text_part(self, block: dict[str, Any], where: str) -> dict[str, Any]:
        _known_keys(block, "text", where)
        part: dict[str, Any] = {"type": "text", "text": _text(block.get("text"), f"{where}.text")}
        self._hint(block, part, where)
        if block.get("citations"):
            self._used.add(ext.CITATIONS)
            part["citations"] = block["citations"]
        return part

    def _image(self, block: dict[str, Any], where: str) -> dict[str, Any]:
        _known_keys(block, "image", where)
        source = _typed(block.get("source"), dict, f"{where}.source", "an object")
        kind = source.get("type")
        if kind == "base64":
            media = _text(source.get("media_type"), f"{where}.source.media_type")
            data = _text(source.get("data"), f"{where}.source.data")
            url = f"data:{media};base64,{data}"
        elif kind == "url":
            url = _text(source.get("url"), f"{where}.source.url")
        elif kind == "file":
            self._used.add(ext.IMAGE_FILE)
            return block
        else:
            raise _fail(f"{where}.source.type", "Input should be 'base64', 'url' or 'file'")
        part: dict[str, Any] = {"type": "image_url", "image_url": {"url": url}}
        self._hint(block, part, where)
        return part

    def _tool_use(self, block: dict[str, Any], where: str) -> dict[str, Any]:
        _known_keys(block, "tool_use", where)
        self._count()
        arguments = _typed(block.get("input"), dict, f"{where}.input", "a valid dictionary")
        try:
            encoded = orjson.dumps(arguments).decode()
        except TypeError:  # not JSON: only a library caller can build one (big ints, objects)
            raise _fail(f"{where}.input", "Input should be JSON") from None
        call: dict[str, Any] = {
            "id": _text(block.get("id"), f"{where}.id"),
            "type": "function",
            "function": {
                "name": _text(block.get("name"), f"{where}.name"),
                "arguments": encoded,
            },
        }
        self._hint(block, call, where)
        return call

    def _tool_result(self, block: dict[str, Any], where: str) -> dict[str, Any]:
        _known_keys(block, "tool_result", where)
        self._count()
        message: dict[str, Any] = {
            "role": "tool",
            "tool_call_id": _text(block.get("tool_use_id"), f"{where}.tool_use_id"),
        }
        content = block.get("content", "")
        if isinstance(content, list):
            parts = []
            for i, inner in enumerate(content):
                kind = _kind(inner, f"{where}.content.{i}")
                if kind not in ("text", "image", "search_result", "document"):
                    raise _fail(f"{where}.content.{i}.type", f"'{kind}' is not a tool result")
                if kind == "image":
                    self._used.add("image in a tool_result")
                parts.append(self._part(inner, kind, f"{where}.content.{i}"))
            content = parts
        else:
            _text(content, f"{where}.content")
        if block.get("cache_control") is not None:
            parts = content if isinstance(content, list) else [{"type": "text", "text": content}]
            parts = parts or [{"type": "text", "text": ""}]
            parts[-1] = {**parts[-1]}
            self._hint(block, parts[-1], where)
            content = parts
        message["content"] = content if isinstance(content, str) else self._collapsed(content) or ""
        if _typed(block.get("is_error", False), bool, f"{where}.is_error", "a valid boolean"):
            self._used.add(ext.IS_ERROR)
            message["is_error"] = True
        return message

    def _collapsed(self, parts: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
        """One plain text part is the plain string (what every OpenAI-compatible server takes).
        Text parts that stay parts (several, or one with a breakpoint: an Anthropic upstream
        keeps them apart) are marked, so an OpenAI-compatible upstream joins them."""
        if len(parts) == 1 and parts[0].keys() == {"type", "text"} and parts[0]["type"] == "text":
            text: str = parts[0]["text"]
            return text
        if parts and all(_is_text(part) for part in parts):
            self._used.add(ext.TEXT_PARTS)
        return parts

    def _hint(self, block: Mapping[str, Any], target: dict[str, Any], where: str) -> None:
        hint = block.get("cache_control")
        if hint is None:
            return
        param = f"{where}.cache_control" if where else "cache_control"
        _typed(hint, dict, param, "an object")
        if hint.get("type") != "ephemeral":
            raise _fail(f"{param}.type", "Input should be 'ephemeral'")
        self._used.add(ext.CACHE_CONTROL)
        target["cache_control"] = hint

    # ---- parameters and tools ------------------------------------------------------------

    def _max_tokens(self, value: Any) -> int:
        tokens: int = _typed(value, int, "max_tokens", "a valid integer")
        highest = self._limits.max_output_tokens
        if not 1 <= tokens <= highest:
            raise _fail("max_tokens", f"must be between 1 and {highest}")
        return tokens

    def _sampling(self, body: dict[str, Any], out: dict[str, Any]) -> None:
        for name in ("temperature", "top_p"):
            if body.get(name) is not None:
                value = _typed(body[name], (int, float), name, "a valid number")
                if not 0 <= value <= 1:
                    raise _fail(name, "must be between 0 and 1")
                out[name] = value
        if body.get("top_k") is not None:
            top_k = _typed(body["top_k"], int, "top_k", "a valid integer")
            if top_k < 0:
                raise _fail("top_k", "must be at least 0")
            self._used.add(ext.TOP_K)
            out["top_k"] = top_k
        if body.get("stop_sequences") is not None:
            stops = _typed(body["stop_sequences"], list, "stop_sequences", "a valid list")
            if len(stops) > self._limits.max_stop:
                raise _fail("stop_sequences", f"at most {self._limits.max_stop} stop sequences")
            if stops:
                out["stop"] = [_text(s, f"stop_sequences.{i}") for i, s in enumerate(stops)]
        self._metadata(body.get("metadata"), out)
        thinking = body.get("thinking")
        if thinking is not None:
            kind = _typed(thinking, dict, "thinking", "an object").get("type")
            if kind not in ("enabled", "disabled", "adaptive"):
                raise _fail("thinking.type", "Input should be 'enabled', 'disabled' or 'adaptive'")
            if kind != "disabled":
                self._used.add(ext.THINKING)
                out["thinking"] = thinking
        tier = body.get("service_tier")
        if tier not in (None, "auto"):
            raise _fail("service_tier", "levergate translates only 'auto'")

    def _output(self, body: dict[str, Any], out: dict[str, Any]) -> None:
        """`output_config` as OpenAI's `response_format` / `reasoning_effort` (which an
        Anthropic upstream writes back as `output_config`), the top-level breakpoint as a hint
        and fast mode as an extension: only an Anthropic upstream can express it."""
        config = body.get("output_config")
        if config is not None:
            for name, value in _typed(config, dict, "output_config", "an object").items():
                if name == "format" and value is not None:
                    out["response_format"] = _schema_format(value)
                elif name == "effort" and value is not None:
                    if value not in _EFFORTS:
                        raise _fail("output_config.effort", "Input should be 'low', 'medium', "
                                    "'high', 'xhigh' or 'max'")  # fmt: skip
                    out["reasoning_effort"] = value
                elif value is not None:
                    raise _fail(f"output_config.{name}", "levergate does not translate this field")
        if body.get("cache_control") is not None:
            self._hint(body, out, "")
        speed = body.get("speed")
        if speed not in (None, "standard"):  # standard is what every upstream does anyway
            if speed != "fast":
                raise _fail("speed", "Input should be 'standard' or 'fast'")
            self._used.add(ext.SPEED)
            out["speed"] = speed

    def _metadata(self, metadata: Any, out: dict[str, Any]) -> None:
        if metadata is None:
            return
        _typed(metadata, dict, "metadata", "an object")
        for name in metadata:
            if name != "user_id":
                raise _fail(f"metadata.{name}", "Extra inputs are not permitted")
        if metadata.get("user_id") is not None:
            out["user"] = _text(metadata["user_id"], "metadata.user_id")

    def _tools(self, body: dict[str, Any], out: dict[str, Any]) -> None:
        tools = body.get("tools")
        if tools is not None:
            _typed(tools, list, "tools", "a valid list")
            if len(tools) > self._limits.max_tools:
                raise _fail("tools", f"at most {self._limits.max_tools} tools per request")
            if tools:
                out["tools"] = [self._tool(tool, f"tools.{i}") for i, tool in enumerate(tools)]
        choice = body.get("tool_choice")
        if choice is None:
            return
        kind = _typed(choice, dict, "tool_choice", "an object").get("type")
        if kind == "tool":
            name = _text(choice.get("name"), "tool_choice.name")
            picked: Any = {"type": "function", "function": {"name": name}}
        elif kind in _CHOICES:
            picked = _CHOICES[kind]
        else:
            raise _fail("tool_choice.type", "Input should be 'auto', 'any', 'tool' or 'none'")
        if not out.get("tools"):
            if kind in ("tool", "any"):
                raise _fail("tool_choice", f"'{kind}' needs tools")
            return  # auto or none without tools: nothing to choose from
        out["tool_choice"] = picked
        if choice.get("disable_parallel_tool_use") is True:
            out["parallel_tool_calls"] = False

    def _tool(self, tool: Any, where: str) -> dict[str, Any]:
        _typed(tool, dict, where, "an object")
        kind = tool.get("type")
        if kind not in (None, "custom"):
            self._used.add(ext.TOOL_PREFIX + _text(kind, f"{where}.type"))
            return dict(tool)
        for name in tool:
            if name not in _TOOL_KEYS:
                raise _fail(f"{where}.{name}", "levergate does not translate this tool field")
        schema = _typed(tool.get("input_schema"), dict, f"{where}.input_schema", "an object")
        function: dict[str, Any] = {"name": _text(tool.get("name"), f"{where}.name")}
        if tool.get("description") is not None:
            function["description"] = _text(tool["description"], f"{where}.description")
        function["parameters"] = schema
        if tool.get("strict") is not None:
            function["strict"] = _typed(tool["strict"], bool, f"{where}.strict", "a boolean")
        out: dict[str, Any] = {"type": "function", "function": function}
        self._hint(tool, out, where)
        return out


def _schema_format(value: Any) -> dict[str, Any]:
    """Anthropic's `{"type": "json_schema", "schema": {...}}` as OpenAI's `response_format`
    (strict: Anthropic decodes to the schema, never only near it)."""
    kind = _typed(value, dict, "output_config.format", "an object").get("type")
    if kind != "json_schema":
        raise _fail("output_config.format.type", "Input should be 'json_schema'")
    for name in value:
        if name not in ("type", "schema"):
            raise _fail(f"output_config.format.{name}", "Extra inputs are not permitted")
    schema = _typed(value.get("schema"), dict, "output_config.format.schema", "an object")
    return {
        "type": "json_schema",
        "json_schema": {"name": SCHEMA_NAME, "schema": schema, "strict": True},
    }


def _required(body: Mapping[str, Any], name: str, where: str = "") -> Any:
    value = body.get(name)
    if value is None:
        raise _fail(f"{where}.{name}" if where else name, "Field required")
    return value


def _kind(block: Any, where: str) -> str:
    if not isinstance(block, dict):
        raise _fail(where, "Input should be an object")
    return _text(block.get("type"), f"{where}.type")


def _known_keys(block: Mapping[str, Any], kind: str, where: str) -> None:
    for name in block:
        if name not in _KEYS[kind]:
            raise _fail(f"{where}.{name}", "Extra inputs are not permitted")


def _is_text(part: Mapping[str, Any]) -> bool:
    return part.get("type") == "text" and part.keys() <= {"type", "text", "cache_control"}
