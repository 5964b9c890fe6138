"""From engine tokens to OpenAI answers: text assembly, stop strings, and the JSON shapes.

Tokens arrive as bytes: a token may end in the middle of a UTF-8 character, so text is decoded
incrementally. A stop string may span several tokens, so the tail of the text that could still
become a stop string is held back until it cannot; the text before a stop string is sent and
the stop string itself never is (the OpenAI behaviour).
"""

from __future__ import annotations

import codecs
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from levergate.core.call import Kind


class TextAssembler:
    def __init__(self, stops: Sequence[str]) -> None:
        self._stops = [s for s in stops if s]
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._held = ""
        self.stopped = False

    def feed(self, data: bytes) -> str:
        """The text that can be sent now; sets `stopped` when a stop string appeared."""
        if self.stopped:
            return ""
        text = self._held + self._decoder.decode(data)
        cut = min((i for i in (text.find(s) for s in self._stops) if i >= 0), default=-1)
        if cut >= 0:
            self.stopped = True
            self._held = ""
            return text[:cut]
        keep = _held_back(text, self._stops)
        self._held = text[len(text) - keep :] if keep else ""
        return text[: len(text) - keep]

    def flush(self) -> str:
        """What is left at the end of the answer (an unfinished stop string is just text)."""
        if self.stopped:
            return ""
        text = self._held + self._decoder.decode(b"", final=True)
        self._held = ""
        return text


def _held_back(text: str, stops: Sequence[str]) -> int:
    """Length of the longest tail of `text` that is a proper prefix of a stop string."""
    longest = 0
    for stop in stops:
        for size in range(min(len(stop) - 1, len(text)), longest, -1):
            if text.endswith(stop[:size]):
                longest = size
                break
    return longest


@dataclass(frozen=True, slots=True)
class Shape:
    """The constant parts of one answer's JSON: its kind, id, creation time and model name."""

    kind: Kind
    id: str
    created: int
    model: str

    @classmethod
    def new(cls, kind: Kind, model: str) -> Shape:
        prefix = "chatcmpl-" if kind == "chat" else "cmpl-"
        return cls(kind, prefix + os.urandom(12).hex(), int(time.time()), model)

    def _envelope(self, *, chunk: bool) -> dict[str, Any]:
        if self.kind == "chat":
            kind = "chat.completion.chunk" if chunk else "chat.completion"
        else:
            kind = "text_completion"
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model}

    def completed(
        self,
        text: str,
        finish_reason: str,
        usage: dict[str, Any],
        logprobs: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        if self.kind == "chat":
            choice: dict[str, Any] = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": logprobs,
                "finish_reason": finish_reason,
            }
        else:
            choice = {
                "index": 0,
                "text": text,
                "logprobs": logprobs,
                "finish_reason": finish_reason,
            }
        return {**self._envelope(chunk=False), "choices": [choice], "usage": usage}

    def chunk(
        self,
        text: str | None,
        finish_reason: str | None = None,
        logprobs: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """A stream chunk: `text` None with no finish reason is the chat role preamble."""
        if self.kind == "chat":
            delta: dict[str, Any] = {}
            if text is None and finish_reason is None:
                delta = {"role": "assistant", "content": ""}
            elif text:
                delta = {"content": text}
            choice: dict[str, Any] = {
                "index": 0,
                "delta": delta,
                "logprobs": logprobs,
                "finish_reason": finish_reason,
            }
        else:
            choice = {
                "index": 0,
                "text": text or "",
                "logprobs": logprobs,
                "finish_reason": finish_reason,
            }
        return {**self._envelope(chunk=True), "choices": [choice]}

    def usage_chunk(self, usage: dict[str, Any]) -> dict[str, Any]:
        return {**self._envelope(chunk=True), "choices": [], "usage": usage}


def usage_of(*, prompt: int, completion: int, cached: int) -> dict[str, Any]:
    """OpenAI usage: cached prompt tokens (reused KV) counted inside prompt_tokens."""
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }
