"""The request rewrites Trim makes besides dropping turns: the output cap (`max_tokens`) and the
truncation of oversized tool results and documents, each leaving a marker the model can read."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from levergate.config import TrimRuleSettings
from levergate.core.call import Call
from levergate.core.tokenizer import TextTokenizer
from levergate.errors import BadRequest
from levergate.policies.trim import TOOL_ROLES

OUTPUT_FIELDS = ("max_completion_tokens", "max_tokens")


@dataclass(frozen=True, slots=True)
class Output:
    """The request's output budget after the alias's default and cap."""

    call: Call
    tokens: int  # what the answer may take of the window (0: nothing known)


def output_budget(call: Call, *, rule: TrimRuleSettings, max_output: int | None) -> Output:
    """Applies `default_max_tokens` and the cap (`max_tokens`, the model's `max_output`)."""
    field, asked = _asked(call.body)
    limits = [v for v in (rule.max_tokens, max_output) if v]
    limit = min(limits) if limits else None
    if asked is None:
        default = rule.default_max_tokens
        if default is None:
            return Output(call, max_output or 0)
        default = min(default, limit) if limit else default
        return Output(call.with_body(**{rule.max_tokens_field: default}), default)
    if limit is None or asked <= limit:
        return Output(call, asked)
    if rule.over_max_tokens == "reject":
        raise BadRequest(
            f"{field} is too large: {asked}. This model supports at most {limit} completion "
            f"tokens, whereas you provided {asked}.",
            param=field,
            code="integer_above_max_value",
        )
    call.ctx.trace.note(layer="trim", text=f"{field} capped from {asked} to {limit}")
    return Output(call.with_body(**{field: limit}), limit)


def _asked(body: Mapping[str, Any]) -> tuple[str, int | None]:
    for field in OUTPUT_FIELDS:
        value = body.get(field)
        if isinstance(value, int) and not isinstance(value, bool):
            return field, value
    return OUTPUT_FIELDS[1], None


@dataclass(frozen=True, slots=True)
class Cuts:
    messages: list[Any]
    cut: int  # texts truncated


def truncate(
    messages: Sequence[Any],
    *,
    tokenizer: TextTokenizer,
    tool_tokens: int | None,
    document_tokens: int | None,
    marker: str,
) -> Cuts:
    """Tool results over `tool_tokens` and text parts of multi-part user messages over
    `document_tokens` keep their first tokens and end with `marker`. A user message's plain
    string content is the question itself and is never cut."""
    out: list[Any] = []
    cut = 0
    for message in messages:
        if not isinstance(message, Mapping):
            out.append(message)
            continue
        role, content = message.get("role"), message.get("content")
        limit = tool_tokens if role in TOOL_ROLES else document_tokens if role == "user" else None
        if limit is None:
            out.append(message)
        elif isinstance(content, str) and role in TOOL_ROLES:
            text = _cut(content, limit, tokenizer, marker)
            cut += text is not content
            out.append(message if text is content else {**message, "content": text})
        elif isinstance(content, list):
            parts = [_cut_part(part, limit, tokenizer, marker) for part in content]
            changed = sum(new is not old for new, old in zip(parts, content, strict=True))
            cut += changed
            out.append({**message, "content": parts} if changed else message)
        else:
            out.append(message)
    return Cuts(out, cut)


def _cut_part(part: Any, limit: int, tokenizer: TextTokenizer, marker: str) -> Any:
    if not isinstance(part, Mapping) or part.get("type") != "text":
        return part
    text = part.get("text")
    if not isinstance(text, str):
        return part
    new = _cut(text, limit, tokenizer, marker)
    return part if new is text else {**part, "text": new}


def _cut(text: str, limit: int, tokenizer: TextTokenizer, marker: str) -> str:
    """`text` itself when it fits (checked without tokenizing when its bytes already bound its
    tokens), else its head and the marker, within `limit` tokens together."""
    if len(text) * 4 <= limit or (len(text) <= limit and text.isascii()):
        return text
    total = tokenizer.tokens(text)
    if total <= limit:
        return text
    note = marker.format(tokens=total)
    keep = max(0, limit - tokenizer.tokens(note) - 2)  # the newline, a longer number
    head = tokenizer.head(text, keep)
    return f"{head}\n{marker.format(tokens=total - tokenizer.tokens(head))}"
