"""Routing rules as values: what a request looks like to a rule (`Facts`), and the first rule
that matches it.

Pure: `Facts` is extracted once per routed request by `layers/route.py` (which owns the I/O-free
but body-shaped work of reading the request), and `first_match` only compares. A rule's `when`
fields all have to hold; the first rule that matches wins, so the order in the config is the
order of precedence.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from levergate.config import RuleSettings, WhenSettings
from levergate.config.routing import (
    MAX_METADATA_KEY_CHARS,
    MAX_METADATA_KEYS,
    MAX_METADATA_VALUE_CHARS,
)
from levergate.errors import BadRequest
from levergate.protocol.openai.body import content_text, content_texts


@dataclass(frozen=True, slots=True)
class Facts:
    """What the rules may test about one request. `prompt_tokens` is None when no rule needs it
    (counting is skipped)."""

    feature: str = ""
    tenant: str = ""
    metadata: Mapping[str, str] = field(default_factory=dict)
    prompt_tokens: int | None = None
    tools: bool = False
    images: bool = False
    response_format: bool = False


def matches(when: WhenSettings, facts: Facts) -> bool:
    if when.feature is not None and facts.feature not in when.feature:
        return False
    if when.tenant is not None and facts.tenant not in when.tenant:
        return False
    if any(facts.metadata.get(k) != v for k, v in when.metadata.items()):
        return False
    tokens = facts.prompt_tokens or 0
    if when.min_prompt_tokens is not None and tokens < when.min_prompt_tokens:
        return False
    if when.max_prompt_tokens is not None and tokens > when.max_prompt_tokens:
        return False
    flags = ((when.tools, facts.tools), (when.images, facts.images),
             (when.response_format, facts.response_format))  # fmt: skip
    return all(wanted is None or wanted == actual for wanted, actual in flags)


def first_match(rules: Sequence[RuleSettings], facts: Facts) -> RuleSettings | None:
    return next((rule for rule in rules if matches(rule.when, facts)), None)


def counts_tokens(rules: Sequence[RuleSettings]) -> bool:
    """Whether any rule tests the prompt's size (otherwise nothing is counted)."""
    return any(
        r.when.min_prompt_tokens is not None or r.when.max_prompt_tokens is not None for r in rules
    )


def metadata_of(body: Mapping[str, Any]) -> dict[str, str]:
    """The request's `metadata`, checked against OpenAI's own bounds (a 400 otherwise: a rule
    must not decide on a value the provider would refuse)."""
    value = body.get("metadata")
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise BadRequest("metadata must be an object of string values", param="metadata")
    if len(value) > MAX_METADATA_KEYS:
        raise BadRequest(f"metadata holds at most {MAX_METADATA_KEYS} keys", param="metadata")
    for key, item in value.items():
        if not isinstance(key, str) or len(key) > MAX_METADATA_KEY_CHARS:
            raise BadRequest(
                f"metadata keys are strings of at most {MAX_METADATA_KEY_CHARS} characters",
                param="metadata",
            )
        if not isinstance(item, str) or len(item) > MAX_METADATA_VALUE_CHARS:
            raise BadRequest(
                f"metadata values are strings of at most {MAX_METADATA_VALUE_CHARS} characters",
                param="metadata",
            )
    return dict(value)


def has_tools(body: Mapping[str, Any]) -> bool:
    return bool(body.get("tools")) or bool(body.get("functions"))


def has_images(body: Mapping[str, Any]) -> bool:
    messages = body.get("messages")
    if not isinstance(messages, list):
        return False
    for message in messages:
        content = message.get("content") if isinstance(message, Mapping) else None
        if isinstance(content, list) and any(
            isinstance(part, Mapping) and part.get("type") in {"image_url", "input_image", "image"}
            for part in content
        ):
            return True
    return False


def wants_json(body: Mapping[str, Any]) -> bool:
    fmt = body.get("response_format")
    return isinstance(fmt, Mapping) and fmt.get("type") in {"json_object", "json_schema"}


def texts(body: Mapping[str, Any]) -> list[str]:
    """Every message's text, in order (the prompt a size rule measures); a completion's prompt."""
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return [prompt]
    if isinstance(prompt, list):
        return [p for p in prompt if isinstance(p, str)]
    messages = body.get("messages")
    out: list[str] = []
    for message in messages if isinstance(messages, list) else []:
        if isinstance(message, Mapping):
            out.extend(content_texts(message.get("content")))
    return out


def last_user_text(body: Mapping[str, Any]) -> str:
    """The text the learned router reads: the last user turn (what the question is), or the
    completion prompt."""
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return prompt
    messages = body.get("messages")
    for message in reversed(messages if isinstance(messages, list) else []):
        if isinstance(message, Mapping) and message.get("role") == "user":
            return content_text(message.get("content"))
    return ""
