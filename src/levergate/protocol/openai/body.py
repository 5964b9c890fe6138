"""What the gateway needs to know about OpenAI-shaped bodies, checked cheaply.

Full validation stays with the upstream (which knows its own parameters); here we check only the
fields the gateway itself relies on, with plain type tests rather than a validation model,
because this runs on every request.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from levergate.config import RequestLimitsSettings
from levergate.core.call import Kind
from levergate.errors import BadRequest
from levergate.policies.tiers import ALLOWED_SERVICE_TIERS
from levergate.protocol.responses.answer import RESPONSE_DELTAS, responses_generated_text

_NUMBER = (int, float)
# Text parts joined into one string: vLLM's separator for a text-only content array.
TEXT_SEPARATOR = "\n"
# field -> accepted types (bool is excluded from numbers explicitly below)
_COMMON: dict[str, tuple[type, ...]] = {
    "model": (str,),
    "stream": (bool,),
    "stream_options": (dict,),
    "max_tokens": (int,),
    "max_completion_tokens": (int,),
    "n": (int,),
    "seed": (int,),
    "temperature": _NUMBER,
    "top_p": _NUMBER,
    "presence_penalty": _NUMBER,
    "frequency_penalty": _NUMBER,
    "stop": (str, list),
    "user": (str,),
    "metadata": (dict,),
    "logit_bias": (dict,),
}
_BY_KIND: dict[Kind, dict[str, tuple[type, ...]]] = {
    "chat": {**_COMMON, "messages": (list,), "tools": (list,), "response_format": (dict,)},
    "completion": {**_COMMON, "prompt": (str, list)},
    # A Responses body: the fields the gateway reads (layers/responses.py checks the items).
    "response": {
        "model": (str,),
        "input": (str, list),
        "instructions": (str,),
        "stream": (bool,),
        "store": (bool,),
        "tools": (list,),
        "text": (dict,),
        "metadata": (dict,),
        "max_output_tokens": (int,),
        "temperature": _NUMBER,
        "top_p": _NUMBER,
        "previous_response_id": (str,),
        "parallel_tool_calls": (bool,),
        "user": (str,),
    },
    "embedding": {
        "model": (str,),
        "input": (str, list),
        "encoding_format": (str,),
        "dimensions": (int,),
        "user": (str,),
    },
}
_REQUIRED: dict[Kind, tuple[str, ...]] = {
    "chat": ("model", "messages"),
    "completion": ("model", "prompt"),
    "embedding": ("model", "input"),
    "response": ("model", "input"),
}


def check_body(kind: Kind, body: Any, *, limits: RequestLimitsSettings) -> dict[str, Any]:
    """Raise `BadRequest` naming the offending field, or return the body as a dict. Counts
    are bounded here (`limits`), before any layer does work proportional to them."""
    if not isinstance(body, dict):
        raise BadRequest("The request body must be a JSON object.")
    for name in _REQUIRED[kind]:
        if body.get(name) is None:  # absent or null: no later check may meet a None here
            raise BadRequest(f"Missing required parameter: '{name}'.", param=name)
    types = _BY_KIND[kind]
    for name, value in body.items():
        expected = types.get(name)
        if expected is None or value is None:
            continue
        if not isinstance(value, expected) or (isinstance(value, bool) and bool not in expected):
            wanted = " or ".join(_TYPE_NAMES[t] for t in expected)
            got = _TYPE_NAMES.get(type(value), type(value).__name__)
            raise BadRequest(
                f"Invalid type for '{name}': expected {wanted}, got {got}.",
                param=name,
                code="invalid_type",
            )
    if kind == "chat":
        _check_messages(body["messages"])
    if "service_tier" in body and kind != "embedding":
        _check_tier(body["service_tier"])
    _check_counts(kind, body, limits)
    return body


# The bodies `CheckedBodies` remembers: at most this many, this many bytes of bodies in all, each
# at most `CHECKED_BODY_BYTES` (a repeated request is small: a cached question).
CHECKED_BODIES = 1024
CHECKED_BYTES = 1 << 20
CHECKED_BODY_BYTES = 8 << 10


class CheckedBodies:
    """The raw JSON bodies `check_body` passed, each with the kind it was checked as, under one
    gateway's `limits` (issue 22: an exact-cache hit checked its unchanged body again every
    time, ~10% of a hit's bytecodes).

    Sound because the verdict is a function of what the key holds: `check_body` is a pure
    function of the kind, the parsed body and the limits; the body is parsed from the raw bytes
    (`parse_json`, deterministic: equal bytes give an equal value), so equal bytes checked as
    the same kind under the same limits get the same verdict. Only a pass is remembered (a
    refused body is checked, and refused, every time). The limits are this object's, fixed: a
    configuration reload builds a new gateway, and with it a new memo. The caller must pass the
    bytes the body was parsed from (`Call.raw`'s contract, which the upstream and the exact
    cache rely on already). A look-up is one dict `get` (`get`, the dict's own); once full
    (count or bytes) the memo starts over, which costs a repeated body one more check."""

    __slots__ = ("_bytes", "_kinds", "get", "limits")

    def __init__(self, limits: RequestLimitsSettings) -> None:
        self.limits = limits
        self._kinds: dict[bytes, Kind] = {}
        self._bytes = 0
        # The kind `raw` passed as, or None: one C call a look-up.
        self.get = self._kinds.get

    def __len__(self) -> int:
        return len(self._kinds)

    def check(self, kind: Kind, body: Any, raw: bytes | None) -> dict[str, Any]:
        """`check_body(kind, body)`; a pass remembered under `raw`, the JSON text `body` was
        parsed from (None: not known, nothing remembered)."""
        checked = check_body(kind, body, limits=self.limits)
        if raw is not None and (size := len(raw)) <= CHECKED_BODY_BYTES:
            kinds = self._kinds
            if len(kinds) >= CHECKED_BODIES or self._bytes + size > CHECKED_BYTES:
                kinds.clear()
                self._bytes = 0
            kinds[raw] = kind
            self._bytes += size
        return checked


def _check_tier(tier: Any) -> None:
    """A `service_tier` levergate can price and pass on (layers/tiers/ checks the model's)."""
    if tier is None or tier in ALLOWED_SERVICE_TIERS:
        return
    allowed = ", ".join(f"'{t}'" for t in ALLOWED_SERVICE_TIERS)
    shown = repr(tier)[:64] if not isinstance(tier, str) else f"'{tier[:64]}'"
    raise BadRequest(f"Invalid value for 'service_tier': {shown}; it must be one of {allowed}.",
                     code="invalid_service_tier", param="service_tier")  # fmt: skip


_TYPE_NAMES: dict[type, str] = {
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "a boolean",
    list: "an array",
    dict: "an object",
}


def _check_messages(messages: list[Any]) -> None:
    if not messages:
        raise BadRequest("'messages' must contain at least one message.", param="messages")
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise BadRequest(
                f"Invalid message at index {index}: each message must be an object with a 'role'.",
                param=f"messages[{index}]",
            )


def _check_counts(kind: Kind, body: dict[str, Any], limits: RequestLimitsSettings) -> None:
    if kind == "embedding":
        inputs = body["input"]
        tokens = isinstance(inputs, list) and all(isinstance(v, int) for v in inputs)
        count = 1 if isinstance(inputs, str) or tokens else len(inputs)
        _at_most("input", count, limits.max_embedding_inputs, what="inputs")
        _in_range(body, "dimensions", 1, limits.max_embedding_dimensions)
        return
    # Each bound compared here, its error built only when it is crossed: this runs on every
    # request (issue 22).
    if kind == "chat" and (count := len(body["messages"])) > limits.max_messages:
        _at_most("messages", count, limits.max_messages, what="messages")
    if kind in ("chat", "response") and isinstance(tools := body.get("tools"), list):
        _at_most("tools", len(tools), limits.max_tools, what="tools")
    if isinstance(stop := body.get("stop"), list):
        _at_most("stop", len(stop), limits.max_stop, what="stop sequences")
        if not all(isinstance(s, str) for s in stop):
            raise BadRequest("Invalid 'stop': each stop sequence must be a string.", param="stop")
    # Only the bounded fields the body has (one C call finds them: most bodies have one), in
    # `_BOUNDED_ORDER` when there are several (which one a 400 names does not vary).
    present = _BOUNDED.intersection(body)
    for param in present if len(present) < 2 else [p for p in _BOUNDED_ORDER if p in present]:
        value = body[param]
        if not isinstance(value, int):
            continue
        if param == "n":
            least, highest = 1, limits.max_n
        elif param == "max_output_tokens":  # OpenAI's lowest max_output_tokens is 16
            least, highest = 16, limits.max_output_tokens
        else:  # a completion with max_tokens 0 echoes the prompt
            least, highest = (1 if kind == "chat" else 0), limits.max_output_tokens
        if not least <= value <= highest:
            _in_range(body, param, least, highest)  # raises


# The integer fields `_check_counts` holds to a range.
_BOUNDED_ORDER = ("n", "max_tokens", "max_completion_tokens", "max_output_tokens")
_BOUNDED = frozenset(_BOUNDED_ORDER)


def _at_most(param: str, count: int, limit: int, *, what: str) -> None:
    if count > limit:
        raise BadRequest(
            f"Invalid '{param}': {count} {what} is more than the limit of {limit} per request.",
            param=param,
            code="array_above_max_length",
        )


def _in_range(body: dict[str, Any], param: str, lowest: int, highest: int) -> None:
    value = body.get(param)
    if isinstance(value, int) and not lowest <= value <= highest:
        raise BadRequest(
            f"Invalid '{param}': {value} is out of range; it must be between {lowest} and "
            f"{highest}.",
            param=param,
            code="integer_out_of_range",
        )


def has_generated_token(chunk: Mapping[str, Any]) -> bool:
    """True when a stream chunk carries generated output (content, a tool call, or text) rather
    than only the role preamble or usage: the moment TTFT is measured at. Asked of every event
    of every stream, so its objects are checked as the parsed JSON's dicts (an ABC's
    `isinstance` is a Python call each)."""
    choices = chunk.get("choices")
    if not isinstance(choices, list):
        return chunk.get("type") in RESPONSE_DELTAS and bool(chunk.get("delta"))
    for choice in choices:
        if not isinstance(choice, dict):
            continue
        if choice.get("text"):
            return True
        delta = choice.get("delta")
        if isinstance(delta, dict) and (
            delta.get("content") or delta.get("tool_calls") or delta.get("reasoning_content")
        ):
            return True
    return False


def is_usage_only(chunk: Mapping[str, Any]) -> bool:
    """The final chunk `stream_options.include_usage` adds: no choices, a usage block."""
    return not chunk.get("choices") and isinstance(chunk.get("usage"), Mapping)


def generated_text(data: Mapping[str, Any]) -> str:
    """The text a chunk or a whole answer generated (content, reasoning, text, tool-call names
    and arguments): what a tokenizer counts when the upstream reported no usage."""
    choices = data.get("choices")
    if not isinstance(choices, list):
        return responses_generated_text(data)
    parts: list[str] = []
    for choice in choices:
        if not isinstance(choice, Mapping):
            continue
        _add_text(parts, choice.get("text"))
        for key in ("delta", "message"):
            part = choice.get(key)
            if not isinstance(part, Mapping):
                continue
            _add_text(parts, part.get("content"))
            _add_text(parts, part.get("reasoning_content"))
            calls = part.get("tool_calls")
            for call in calls if isinstance(calls, list) else ():
                function = call.get("function") if isinstance(call, Mapping) else None
                if isinstance(function, Mapping):
                    _add_text(parts, function.get("name"))
                    _add_text(parts, function.get("arguments"))
    return "".join(parts)


def _add_text(parts: list[str], value: Any) -> None:
    if isinstance(value, str):
        parts.append(value)


def embedding_inputs(value: Any) -> list[Any]:
    """An embeddings request's inputs one by one (a string, a list of strings, one list of
    token ids, a list of token-id lists); [] for anything else, which goes upstream as it is,
    to be judged there. The embeddings cache and micro-batching split requests by it."""
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list) or not value:
        return []
    if is_token_ids(value):
        return [value]
    if all(isinstance(v, str) for v in value) or all(is_token_ids(v) for v in value):
        return list(value)
    return []


def is_token_ids(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    )


def joined_text(parts: list[Any]) -> str | list[Any]:
    """A content array of plain text parts only as one string (the shape every
    OpenAI-compatible server takes: llama.cpp's Python server answers an array with a 500);
    any other array as it is. Translations write it once they have dropped their hints."""
    texts = []
    for part in parts:
        if not isinstance(part, Mapping) or part.keys() != {"type", "text"}:
            return parts
        text = part["text"]
        if part["type"] != "text" or not isinstance(text, str):
            return parts
        texts.append(text)
    return TEXT_SEPARATOR.join(texts) if texts else parts


def content_text(content: Any, *, sep: str = "\n") -> str:
    """The text of a message's `content`: its text parts joined by `sep`."""
    return sep.join(content_texts(content))


def content_texts(content: Any) -> list[str]:
    """The text parts of a message's `content`: the string itself, or each text part (images,
    audio and other parts carry none); [] for anything else."""
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        return [
            part["text"]
            for part in content
            if isinstance(part, Mapping) and isinstance(part.get("text"), str)
        ]
    return []
