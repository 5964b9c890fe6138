"""`Tokenizer`: how many tokens a text is for a model, when nobody reported it.

A one-method seam so the levers that need a count share one: the measurement layer counts a
stream's output when the upstream sent no usage (llama.cpp's server does not), and routing and
trimming will count prompts. `TokenCount.how` says how far to trust the figure: `counted` with
the model's own tokenizer, `estimated` from the text's length when its tokenizer is unknown.
The implementation (`protocol.tokens.TiktokenCounter`) lives outside `core/`; tests may pass
`LengthEstimate`, which needs nothing.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

# Characters per token of English text in the OpenAI tokenizers: the usual rule of thumb.
CHARS_PER_TOKEN = 4.0


class TokenSource(enum.StrEnum):
    """Where a token figure came from."""

    REPORTED = "reported"  # the upstream's own usage block
    COUNTED = "counted"  # the model's tokenizer, run here
    ESTIMATED = "estimated"  # the text's length, for a model whose tokenizer is unknown
    NONE = "none"  # nothing was generated, or nothing could be counted


@dataclass(frozen=True, slots=True)
class TokenCount:
    tokens: int
    how: TokenSource


class Tokenizer(Protocol):
    def count(self, text: str, *, model: str) -> TokenCount:
        """Tokens `text` is for `model` (the model that produced or will read it)."""
        ...


class LengthEstimate:
    """A token count from the text's length alone: for models whose tokenizer is not here."""

    def __init__(self, *, chars_per_token: float = CHARS_PER_TOKEN) -> None:
        self._chars_per_token = chars_per_token

    def count(self, text: str, *, model: str) -> TokenCount:  # noqa: ARG002 (the seam's shape)
        if not text:
            return TokenCount(0, TokenSource.NONE)
        tokens = max(1, round(len(text) / self._chars_per_token))
        return TokenCount(tokens, TokenSource.ESTIMATED)
