"""Tokenizing a prompt piece by piece, so a piece a recent prompt had too (a long system prompt)
is not tokenized again: ~3.7 ms of a warm 1.7k-token prompt's time to first token went to
tokenizing it whole (benchmarks/results/local_in_place_ab.md).

llama.cpp's tokenizer first cuts the text at every occurrence of a special token's text
(`tokenizer_st_partition`), then tokenizes each raw fragment between them on its own, so a text
cut just before a special token's occurrence tokenizes as its pieces do, one after the other,
when llama.cpp makes that cut too and nothing crosses it. That holds when no two occurrences of
special tokens' texts overlap anywhere in the text (each is then matched where it is), the token
at the cut neither strips the whitespace before it (LSTRIP) nor starts with whitespace itself
(a stripping token before it would eat it), and only the first piece takes the BOS token: a
vocabulary that appends an EOS or SEP, or is neither BPE nor SentencePiece, is tokenized whole.
Pieces of at least `MIN_CACHED_CHARS` are kept, least recently used out first, within a token
budget; the short ones between them are tokenized together (they cost less to tokenize than to
look up, and a text of many special tokens is not tokenized in thousands of calls).
"""

from __future__ import annotations

import threading
from array import array
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

MIN_CACHED_CHARS = 512
# Tokens of cached pieces kept (4 bytes each): a few hundred long system prompts.
BUDGET_TOKENS = 1 << 18


@dataclass(frozen=True, slots=True)
class Special:
    """A token llama.cpp cuts the text at (CONTROL, USER_DEFINED or UNKNOWN)."""

    text: str
    lstrip: bool


Tokenize = Callable[[str, bool], list[int]]  # (text, add_special) -> tokens


def cuts(text: str, specials: Sequence[Special]) -> list[int] | None:
    """Where `text` may be cut so its pieces tokenize as it does (ascending, 0 not included),
    or None when occurrences of special tokens overlap and it must be tokenized whole."""
    found: list[tuple[int, int, Special]] = []
    for special in specials:
        at = text.find(special.text)
        while at >= 0:
            found.append((at, at + len(special.text), special))
            at = text.find(special.text, at + 1)
    found.sort(key=lambda f: (f[0], f[1]))
    out: list[int] = []
    end = 0
    for start, stop, special in found:
        if start < end:
            return None
        end = stop
        if start > 0 and not special.lstrip and not special.text[0].isspace():
            out.append(start)
    return out


class PieceTokenizer:
    """`tokenize(text)`: the text's tokens (BOS included when the model adds one), tokenized
    piece by piece when `specials` is given (None: whole, always), its long pieces cached."""

    def __init__(
        self,
        tokenize: Tokenize,
        specials: Sequence[Special] | None,
        *,
        budget_tokens: int = BUDGET_TOKENS,
    ) -> None:
        self._tokenize = tokenize
        self._specials = specials
        self._budget = budget_tokens
        self._pieces: OrderedDict[tuple[str, bool], array[int]] = OrderedDict()
        self._held = 0
        self._lock = threading.Lock()  # prompts are prepared in worker threads
        self.hits = 0

    def __call__(self, text: str) -> list[int]:
        at = cuts(text, self._specials) if self._specials is not None and text else None
        if at is None:
            return self._tokenize(text, True)  # noqa: FBT003 (add_special: the BOS)
        tokens: list[int] = []
        short = 0  # where the run of short pieces not yet tokenized starts
        for start, stop in zip([0, *at], [*at, len(text)], strict=True):
            if stop - start >= MIN_CACHED_CHARS:
                if short < start:
                    tokens.extend(self._tokenize(text[short:start], short == 0))
                tokens.extend(self._cached(text[start:stop], first=start == 0))
                short = stop
        if short < len(text):
            tokens.extend(self._tokenize(text[short:], short == 0))
        return tokens

    def _cached(self, piece: str, *, first: bool) -> Sequence[int]:
        key = (piece, first)
        with self._lock:
            cached = self._pieces.get(key)
            if cached is not None:
                self._pieces.move_to_end(key)
                self.hits += 1
                return cached
        tokens = array("i", self._tokenize(piece, first))
        if len(tokens) > self._budget:
            return tokens
        with self._lock:
            if key not in self._pieces:
                self._pieces[key] = tokens
                self._held += len(tokens)
            while self._held > self._budget:
                _, dropped = self._pieces.popitem(last=False)
                self._held -= len(dropped)
        return tokens
