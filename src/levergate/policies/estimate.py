"""What a call will cost before it is sent: the token estimate a TPM limit charges at
admission, and the amount it is corrected to once the real usage is known.

Providers that enforce tokens-per-minute reserve the prompt plus the output cap at admission
(OpenAI does; so does the simulator). The prompt is estimated here at one token per
`chars_per_token` characters of its text, which tracks BPE tokenizers on English within
roughly 10-20%; the error is corrected after the call from `usage`, so the estimate only has
to be good enough to pace, not exact.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import orjson

Charge = Literal["reserved", "used"]

DEFAULT_OUTPUT_TOKENS = 256  # charged when a request sets no output cap
_MESSAGE_OVERHEAD = 4  # role and separators, per message


def prompt_tokens(body: Mapping[str, Any], *, chars_per_token: float = 4.0) -> int:
    """Estimated prompt tokens of a chat, completion or embedding body."""
    chars = 0
    messages = body.get("messages")
    if isinstance(messages, list):
        for message in messages:
            chars += _MESSAGE_OVERHEAD * int(chars_per_token)
            if isinstance(message, Mapping):
                chars += _text_length(message.get("content"))
                if message.get("tool_calls"):
                    chars += len(orjson.dumps(message["tool_calls"]))
        if body.get("tools"):
            chars += len(orjson.dumps(body["tools"]))
    for field in ("prompt", "input", "instructions"):  # input, instructions: a Responses body
        chars += _text_length(body.get(field))
    return max(1, -(-chars // max(1, int(chars_per_token))))


def output_cap(body: Mapping[str, Any], *, default: int = DEFAULT_OUTPUT_TOKENS) -> int:
    for field in ("max_completion_tokens", "max_tokens", "max_output_tokens"):
        value = body.get(field)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return default


def reserved_tokens(body: Mapping[str, Any], *, embedding: bool = False) -> int:
    """What a TPM limit charges at admission: prompt plus output cap (no output for embeddings)."""
    return prompt_tokens(body) + (0 if embedding else output_cap(body))


def actual_tokens(
    usage: Mapping[str, Any], *, body: Mapping[str, Any], charge: Charge, embedding: bool = False
) -> int | None:
    """The corrected charge from the provider's `usage`: prompt plus the output cap when the
    provider keeps its reservation ("reserved"), or prompt plus the tokens really generated."""
    prompt = usage.get("prompt_tokens", usage.get("input_tokens"))
    if not isinstance(prompt, int):
        return None
    if embedding:
        return prompt
    if charge == "reserved":
        return prompt + output_cap(body)
    completion = usage.get("completion_tokens", usage.get("output_tokens", 0))
    return prompt + (completion if isinstance(completion, int) else 0)


def _text_length(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, list):
        return sum(_text_length(part) for part in value)
    if isinstance(value, Mapping):
        text = value.get("text")
        return len(text) if isinstance(text, str) else len(orjson.dumps(value))
    return 0
