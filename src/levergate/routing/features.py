"""What the learned router sees of a prompt: the MiniLM embedding plus a few length and
structure features, cheap enough for the request path (the embedding is the cost; the rest is
a pass over at most `TEXT_CAP` characters).

Training (`routing/train.py`) and serving (`layers/route.py`) build the vector with these same
functions; the router file records the names and order of the structure features, and loading
refuses a file whose list differs from this module's (a silent reordering would route on
garbage).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Sequence

import numpy as np
import numpy.typing as npt

# Structure features are computed on at most this many characters of the prompt (the length
# features read the whole of it): a head this long already says what kind of prompt it is, and
# reading it costs ~0.2 ms where a 100k-character loop in Python cost 5.6 ms of the decision.
TEXT_CAP = 16_384
# Shares of ASCII digits, capitals and maths symbols, counted in C (bytes.translate) on the
# head's UTF-8: no byte of a multi-byte character is ASCII, so each count is exact.
_DIGITS = b"0123456789"
_UPPER = bytes(range(ord("A"), ord("Z") + 1))
_MATH = b"=+^*/<>$\\|%"
STRUCTURE = (
    "log_chars", "log_words", "log_lines", "digit_share", "upper_share", "math_share",
    "question_marks", "code",
)  # fmt: skip

EmbedMany = Callable[[list[str]], Awaitable[npt.NDArray[np.float32]]]


def structure(text: str) -> list[float]:
    """The length and structure features of one prompt, in `STRUCTURE` order."""
    head = text[:TEXT_CAP]
    chars = max(len(head), 1)
    data = head.encode("utf-8", "surrogatepass")
    return [
        math.log1p(len(text)),
        math.log1p(len(head.split())),
        math.log1p(head.count("\n")),
        _count(data, _DIGITS) / chars,
        _count(data, _UPPER) / chars,
        _count(data, _MATH) / chars,
        float(min(head.count("?"), 5)),
        1.0 if "```" in head or "def " in head or "};" in head else 0.0,
    ]


def _count(data: bytes, members: bytes) -> int:
    return len(data) - len(data.translate(None, members))


def embed_text(text: str, *, text_chars: int) -> str:
    """The part of a prompt the embedder reads (it truncates to its token limit anyway; cutting
    the characters first keeps a huge prompt from costing a huge tokenization)."""
    return text[:text_chars] if text.strip() else "(empty)"


def vectors(texts: Sequence[str], embeddings: npt.NDArray[np.float32]) -> npt.NDArray[np.float64]:
    """Feature rows: each text's embedding followed by its structure features."""
    rows = np.array([structure(t) for t in texts], dtype=np.float64).reshape(len(texts), -1)
    return np.hstack([embeddings.astype(np.float64), rows])
