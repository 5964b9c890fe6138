"""Trim: per model alias, the prompt budget, output caps, truncation of oversized tool results
and documents, and the optional summary of dropped history (layers/trim).

    trim:
      models:
        gpt-4o:                      # an alias from `models:` ("*" for every other one)
          context_window: 128000     # until the model catalog supplies it
          max_output: 16384
          budget: 8000               # prompt tokens; overrides context_window - output
          default_max_tokens: 1024   # set when the request names none
          max_tokens: 4096           # the most a request may ask (cap, or 400: over_max_tokens)
          tool_result_tokens: 2000   # longer tool results are cut, with a visible marker
          document_tokens: 4000      # so are text parts of multi-part user messages
          summary_model: gpt-4o-mini # summarise dropped history with this alias (optional)

An alias without an entry is not trimmed: its stack has no Trim layer and pays nothing.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from levergate.config.base import _Strict

# A marker that says, in the prompt the model reads, that text was cut and how much.
TRIM_MARKER = "[… {tokens:,} tokens trimmed by levergate …]"
# Tokenizer names (protocol/tokens.py): a tiktoken encoding, a file, a bundled one, or "auto".
_TOKENIZER = re.compile(r"auto|estimate|o200k_base|cl100k_base|minilm|bundled|(hf|gguf):.+")


class TrimRuleSettings(_Strict):
    """Trim for one alias. Token figures are the alias's own tokenizer's."""

    # The model's window and output limit: the model catalog's values once it is wired in.
    context_window: int | None = Field(None, ge=1, le=100_000_000)
    max_output: int | None = Field(None, ge=1, le=100_000_000)
    # Prompt tokens allowed; None: the window minus the request's output budget.
    budget: int | None = Field(None, ge=1, le=100_000_000)
    default_max_tokens: int | None = Field(None, ge=1)
    max_tokens: int | None = Field(None, ge=1)
    # Above `max_tokens`: "cap" lowers it (the answer may end with finish_reason "length",
    # which the client sees), "reject" answers 400 as OpenAI does above a model's limit.
    over_max_tokens: Literal["cap", "reject"] = "cap"
    # The field a default is written to: o-series models take only max_completion_tokens.
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"
    tokenizer: str = "auto"
    tool_result_tokens: int | None = Field(None, ge=16)
    document_tokens: int | None = Field(None, ge=16)
    summary_model: str | None = None
    summary_tokens: int = Field(256, ge=16, le=8192)  # the summary's max_tokens (and reserve)
    # Of the dropped history, at most the newest this many tokens (chars / 4) are summarised.
    summary_input_tokens: int = Field(8000, ge=256, le=1_000_000)
    start_with_user: bool = True

    @field_validator("tokenizer")
    @classmethod
    def _known_tokenizer(cls, value: str) -> str:
        if not _TOKENIZER.fullmatch(value):
            raise ValueError(
                f"unknown tokenizer {value!r}: auto, estimate, o200k_base, cl100k_base, "
                "minilm, bundled, hf:PATH or gguf:PATH"
            )
        kind, _, path = value.partition(":")
        if kind in ("hf", "gguf") and path and not Path(path).is_file():
            raise ValueError(f"tokenizer {value!r}: no file at {path}")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> TrimRuleSettings:
        if (
            self.default_max_tokens
            and self.max_tokens
            and self.default_max_tokens > self.max_tokens
        ):
            raise ValueError("default_max_tokens is above max_tokens")
        return self

    def wants_counts(self) -> bool:
        """Whether the layer must count prompts (not only rewrite max_tokens)."""
        return bool(
            self.budget or self.context_window or self.tool_result_tokens or self.document_tokens
        )


class TrimSettings(_Strict):
    models: dict[str, TrimRuleSettings] = Field(default_factory=dict)
    # Tokens an image costs when its size is unknown: 1024x1024 at high detail (85 + 4 x 170).
    image_tokens: int = Field(765, ge=0)
    marker: str = TRIM_MARKER
    # Prompts with more text than this are counted in a worker thread, so one huge request
    # does not stall the event loop (tiktoken releases the GIL while it encodes).
    thread_chars: int = Field(200_000, ge=1)

    @field_validator("marker")
    @classmethod
    def _marker_formats(cls, value: str) -> str:
        try:
            value.format(tokens=1)
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(f"marker must format with {{tokens}} only: {exc}") from None
        return value

    def check_aliases(self, aliases: Collection[str]) -> None:
        """Every alias named here exists (a typo would silently never trim)."""
        for name, rule in self.models.items():
            if name not in aliases:
                raise ValueError(f"trim.models: unknown model alias {name!r}")
            if rule.summary_model is not None and rule.summary_model not in aliases:
                raise ValueError(
                    f"trim.models.{name}: unknown summary_model {rule.summary_model!r}"
                )
