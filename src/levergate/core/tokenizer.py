"""`Tokenizer`: how many tokens a text is for a model, when nobody reported it.

A one-method seam so the levers that need a count share one: the measurement layer counts a
stream's output when the upstream sent no usage (llama.cpp's server does not), and routing and
trimming will count prompts. `TokenCount.how` says how far to trust the figure: `counted` with
the model's own tokenizer, `estimated` from the text's length when its tokenizer is unknown.
The implementation (`protocol.tokens.TiktokenCounter`) lives outside `core/`; tests may pass
`LengthEstimate`, which needs nothing.

`TextTokenizer` is one model's tokenizer, resolved once (at start-up, for a configured alias):
what Trim counts a prompt with and cuts an oversized tool result with. Its `how` is fixed per
tokenizer, so a figure built from it carries where it came from (`weakest`).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

# Characters per token of English text in the OpenAI tokenizers: the usual rule of thumb.
CHARS_PER_TOKEN = 4.0


class TokenSource(enum.StrEnum):
    """Where a token figure came from."""

    REPORTED = "reported"  # the upstream's own usage block
    COUNTED = "counted"  # the model's tokenizer, run here
    ESTIMATED = "estimated"  # the text's length, for a model whose tokenizer is unknown
    NONE = "none"  # nothing was generated, or nothing could be counted


# The field levergate adds to a usage block it filled itself (an upstream that reported none):
# `counted` or `estimated`, as `TokenSource` says. Absent from what an upstream reported.
USAGE_SOURCE = "levergate_source"


def filled_flag(usage: Mapping[str, Any] | None) -> dict[str, str]:
    """The flag of a usage block levergate filled, to carry into a translation's own usage
    block (empty for one the upstream reported)."""
    source = usage.get(USAGE_SOURCE) if usage is not None else None
    return {USAGE_SOURCE: source} if isinstance(source, str) else {}


@dataclass(frozen=True, slots=True)
class TokenCount:
    tokens: int
    how: TokenSource


class Tokenizer(Protocol):
    def count(self, text: str, *, model: str) -> TokenCount:
        """Tokens `text` is for `model` (the model that produced or will read it)."""
        ...


class TextTokenizer(Protocol):
    """One model's tokenizer: counts text and cuts it to a number of tokens."""

    @property
    def how(self) -> TokenSource:
        """COUNTED for a real tokenizer, ESTIMATED for a length estimate."""
        ...

    def tokens(self, text: str) -> int:
        """Tokens of `text`, without special tokens (a chat's overhead is counted apart)."""
        ...

    def head(self, text: str, tokens: int) -> str:
        """The longest start of `text` that is at most `tokens` tokens (whole characters)."""
        ...


def weakest(first: TokenSource, second: TokenSource) -> TokenSource:
    """The trust of a figure summed from two: an estimate anywhere makes the sum an estimate."""
    if TokenSource.ESTIMATED in (first, second):
        return TokenSource.ESTIMATED
    if first is TokenSource.NONE:
        return second
    return first


class LengthEstimate:
    """A token count from the text's length alone: for models whose tokenizer is not here."""

    def __init__(self, *, chars_per_token: float = CHARS_PER_TOKEN) -> None:
        self._chars_per_token = chars_per_token

    def count(self, text: str, *, model: str) -> TokenCount:  # noqa: ARG002 (the seam's shape)
        if not text:
            return TokenCount(0, TokenSource.NONE)
        tokens = max(1, round(len(text) / self._chars_per_token))
        return TokenCount(tokens, TokenSource.ESTIMATED)

    @property
    def how(self) -> TokenSource:
        return TokenSource.ESTIMATED

    def tokens(self, text: str) -> int:
        return self.count(text, model="").tokens

    def head(self, text: str, tokens: int) -> str:
        return text[: max(0, int(tokens * self._chars_per_token))]
