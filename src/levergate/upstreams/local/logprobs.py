"""Token log-probabilities: scored on the engine thread, shaped as OpenAI's on the event loop.

Why the engine computes them: a cascade's default check (`mean_logprob`) reads the cheap step's
token logprobs, and the embedded engine is the default upstream, so without them no cascade
could run on `make run`. They are computed only when a request asks (`logprobs: true` with
`top_logprobs` 0-20 on chat, `logprobs: N` 0-5 on completions): a request that does not ask
takes exactly the decoding path it took before.

What a logprob is here: the log-softmax of the raw logits row the token was sampled from — the
model's own confidence, before temperature, top-p and `logit_bias` reshape the choice (what
llama.cpp's server reports by default, and what a confidence check must read: a sampled answer
is not more certain for being sampled hot). The alternatives are the row's most likely tokens,
most likely first.

Text and logprobs leave together: an entry is handed out once its token's text has been sent, so
a token whose text is held back (the start of a possible stop string, half a UTF-8 character)
gets its entry with the chunk that finally carries the text, and a stop string's own tokens,
whose text is never sent, get none (`Track`).
"""

from __future__ import annotations

import codecs
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from levergate.core.call import Kind

Logits = npt.NDArray[np.float32]
Piece = Callable[[int], bytes]


@dataclass(frozen=True, slots=True)
class Scored:
    """One generated token's logprob and its `top` alternatives as (token id, logprob)."""

    logprob: float
    top: tuple[tuple[int, float], ...] = ()


def score(logits: Logits, token: int, *, top: int) -> Scored:
    """`token`'s log-softmax in `logits`, and the `top` most likely ids (engine thread: the row
    is a view into llama.cpp's buffer, valid only until the next decode)."""
    peak = float(logits.max())
    total = peak + float(np.log(np.exp(logits - peak).sum(dtype=np.float64)))
    if top <= 0:
        return Scored(float(logits[token]) - total)
    count = min(top, len(logits))
    ids = np.argpartition(logits, len(logits) - count)[len(logits) - count :]
    ids = ids[np.argsort(-logits[ids], kind="stable")]
    return Scored(
        float(logits[token]) - total,
        tuple((int(i), float(logits[i]) - total) for i in ids),
    )


@dataclass(frozen=True, slots=True)
class Entry:
    """A scored token with its text, waiting to be sent."""

    token: int
    piece: bytes
    scored: Scored
    start: int  # byte offset of the token's text in the answer
    offset: int  # character offset (the legacy completions' `text_offset`)

    @property
    def end(self) -> int:
        return self.start + len(self.piece)


class Track:
    """One answer's logprob entries, released as its text is sent (`sent` counts the UTF-8
    bytes of the text sent so far)."""

    def __init__(self, *, kind: Kind, piece: Piece) -> None:
        self.kind = kind
        self._piece = piece
        self._pending: deque[Entry] = deque()
        self._bytes = 0
        self._chars = 0
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def add(self, ids: Sequence[int], scores: Sequence[Scored]) -> None:
        for token, scored in zip(ids, scores, strict=True):
            piece = self._piece(token)
            self._pending.append(Entry(token, piece, scored, self._bytes, self._chars))
            self._bytes += len(piece)
            self._chars += len(self._decoder.decode(piece))

    def ready(self, sent: int) -> list[Entry]:
        """The entries whose whole text has been sent."""
        out: list[Entry] = []
        while self._pending and self._pending[0].end <= sent:
            out.append(self._pending.popleft())
        return out

    def rest(self, sent: int) -> list[Entry]:
        """At the end of the answer: the entries whose text was at least partly sent (or that
        have none, where it was); the others (a stop string's tokens) are dropped."""
        out = [e for e in self._pending if e.start < sent or e.end <= sent]
        self._pending.clear()
        return out

    def shape(self, entries: Sequence[Entry]) -> dict[str, Any]:
        """OpenAI's `logprobs` object of a choice (or of a stream chunk's choice)."""
        if self.kind == "chat":
            return {"content": [self._content(e) for e in entries], "refusal": None}
        return {
            "tokens": [_text(e.piece) for e in entries],
            "token_logprobs": [e.scored.logprob for e in entries],
            "top_logprobs": [self._legacy_top(e) for e in entries],
            "text_offset": [e.offset for e in entries],
        }

    def _content(self, entry: Entry) -> dict[str, Any]:
        alternatives = []
        for token, logprob in entry.scored.top:
            piece = self._piece(token)
            alternatives.append({"token": _text(piece), "logprob": logprob, "bytes": list(piece)})
        return {
            "token": _text(entry.piece),
            "logprob": entry.scored.logprob,
            "bytes": list(entry.piece),
            "top_logprobs": alternatives,
        }

    def _legacy_top(self, entry: Entry) -> dict[str, float]:
        """The legacy shape: a token -> logprob map of the alternatives, always holding the
        chosen token (OpenAI: "up to logprobs + 1 elements")."""
        top: dict[str, float] = {}
        for token, logprob in entry.scored.top:  # most likely first: it keeps a shared text
            top.setdefault(_text(self._piece(token)), logprob)
        top.setdefault(_text(entry.piece), entry.scored.logprob)
        return top


def _text(piece: bytes) -> str:
    return piece.decode("utf-8", errors="replace")
