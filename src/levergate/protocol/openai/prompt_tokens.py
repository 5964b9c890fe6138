"""How many prompt tokens a chat request is, counted the way OpenAI's cookbook counts them.

Trim needs each message's share of the prompt (to keep the newest turns that fit) and the part
no trimming can remove (tools, the reply's priming). The rules are those of OpenAI's cookbook
("How to count tokens with tiktoken", sections 6 and 7), which it checks against the API's own
`prompt_tokens` (129 for its example on gpt-4, 124 on gpt-4o; 105 and 101 with its tool):

- every message costs 3 tokens of framing, plus the tokens of each of its string values
  (the role too), plus 1 more when it has a `name`; the reply is primed with 3 more
  (`<|start|>assistant<|message|>`);
- each function tool costs `func_init` (7 on o200k models, 10 on cl100k ones), plus its
  `name:description` line (a final period dropped), plus 3 to open its properties, 3 and a
  `name:type:description` line per property, -3 plus 3 and the value per enum list item; the
  tool list closes with 12.

What the cookbook does not cover is counted as text and said so where it is a guess: a
multi-part message's text parts are text; an assistant's tool calls are the tokens of their
names and arguments; an image is `image_tokens` (a 1024x1024 high-detail image by default,
since the size is not known without fetching it) and makes the count ESTIMATED, as does any
other part (audio, files: their JSON length / 4). A local model's chat template differs from
OpenAI's framing, so its per-message overhead is the same approximation: the texts are counted
by its own tokenizer, the framing is not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from levergate.core.tokenizer import TextTokenizer, TokenSource, weakest

TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
REPLY_PRIMING = 3
# The cookbook's function-definition framing (section 7).
FUNC_INIT_O200K = 7
FUNC_INIT_CL100K = 10
PROP_INIT = 3
PROP_KEY = 3
ENUM_INIT = -3
ENUM_ITEM = 3
FUNC_END = 12
# OpenAI's vision pricing: 85 base tokens, 170 per 512-px tile (a 1024x1024 image: 4 tiles).
IMAGE_LOW_DETAIL = 85
IMAGE_DEFAULT = 85 + 4 * 170
CHARS_PER_TOKEN = 4


@dataclass(frozen=True, slots=True)
class PromptCount:
    """A chat request's prompt tokens: each message's share, and the part trimming cannot
    touch (tools and the reply priming). `how` is ESTIMATED when any part was."""

    messages: tuple[int, ...]
    fixed: int
    how: TokenSource

    @property
    def total(self) -> int:
        return sum(self.messages) + self.fixed


@dataclass(frozen=True, slots=True)
class Counter:
    """Counts chat prompts with one model's tokenizer."""

    tokenizer: TextTokenizer
    func_init: int = FUNC_INIT_O200K
    image_tokens: int = IMAGE_DEFAULT

    def prompt(self, body: Mapping[str, Any]) -> PromptCount:
        messages = body.get("messages")
        counts, how = [], self.tokenizer.how
        for message in messages if isinstance(messages, list) else ():
            tokens, part_how = self.message(message)
            counts.append(tokens)
            how = weakest(how, part_how)
        tools = body.get("tools")
        fixed = REPLY_PRIMING + (self.tools(tools) if isinstance(tools, list) else 0)
        return PromptCount(tuple(counts), fixed, how)

    def message(self, message: Any) -> tuple[int, TokenSource]:
        """One message's tokens, framing included, and how far to trust them."""
        if not isinstance(message, Mapping):
            return TOKENS_PER_MESSAGE, TokenSource.ESTIMATED
        tokens, how = TOKENS_PER_MESSAGE, self.tokenizer.how
        for key, value in message.items():
            if isinstance(value, str):
                tokens += self.tokenizer.tokens(value)
                if key == "name":
                    tokens += TOKENS_PER_NAME
            elif key == "content" and isinstance(value, list):
                for part in value:
                    part_tokens, part_how = self.part(part)
                    tokens += part_tokens
                    how = weakest(how, part_how)
            elif key == "tool_calls" and isinstance(value, list):
                tokens += sum(self._tool_call(call) for call in value)
            elif value is not None and not isinstance(value, bool | int | float):
                tokens += _estimate(value)
                how = TokenSource.ESTIMATED
        return tokens, how

    def part(self, part: Any) -> tuple[int, TokenSource]:
        """One part of a multi-part content list."""
        if isinstance(part, Mapping):
            kind = part.get("type")
            if kind == "text" and isinstance(text := part.get("text"), str):
                return self.tokenizer.tokens(text), self.tokenizer.how
            if kind == "image_url":
                image = part.get("image_url")
                low = isinstance(image, Mapping) and image.get("detail") == "low"
                return (IMAGE_LOW_DETAIL if low else self.image_tokens), TokenSource.ESTIMATED
        return _estimate(part), TokenSource.ESTIMATED

    def tools(self, tools: Sequence[Any]) -> int:
        """The cookbook's count of a tools list (0 for none)."""
        total = 0
        for tool in tools:
            function = tool.get("function") if isinstance(tool, Mapping) else None
            if not isinstance(function, Mapping):
                total += _estimate(tool)
                continue
            total += self.func_init + self._function(function)
        return total + FUNC_END if tools else 0

    def _function(self, function: Mapping[str, Any]) -> int:
        name, description = _text(function.get("name")), _text(function.get("description"))
        tokens = self.tokenizer.tokens(f"{name}:{description.removesuffix('.')}")
        parameters = function.get("parameters")
        properties = parameters.get("properties") if isinstance(parameters, Mapping) else None
        if not isinstance(properties, Mapping) or not properties:
            return tokens
        tokens += PROP_INIT
        for key, value in properties.items():
            tokens += PROP_KEY
            spec: Mapping[str, Any] = value if isinstance(value, Mapping) else {}
            enum = spec.get("enum")
            if isinstance(enum, list):
                tokens += ENUM_INIT
                for item in enum:
                    tokens += ENUM_ITEM + self.tokenizer.tokens(str(item))
            kind, desc = _text(spec.get("type")), _text(spec.get("description"))
            tokens += self.tokenizer.tokens(f"{key}:{kind}:{desc.removesuffix('.')}")
            # Nested schemas are beyond the cookbook: their JSON text is the best guess.
            nested = {k: v for k, v in spec.items() if k in ("properties", "items")}
            if nested:
                tokens += self.tokenizer.tokens(orjson.dumps(nested).decode())
        return tokens

    def _tool_call(self, call: Any) -> int:
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping):
            return _estimate(call)
        return self.tokenizer.tokens(_text(function.get("name"))) + self.tokenizer.tokens(
            _text(function.get("arguments"))
        )


def func_init_for(encoding: str | None) -> int:
    """The function framing of the cookbook for an encoding (cl100k models have more)."""
    return FUNC_INIT_CL100K if encoding == "cl100k_base" else FUNC_INIT_O200K


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _estimate(value: Any) -> int:
    try:
        size = len(orjson.dumps(value))
    except TypeError:
        size = len(str(value))
    return -(-size // CHARS_PER_TOKEN)
