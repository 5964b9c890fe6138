"""Prompt-lookup decoding: the draft comes from the text itself, not from a second model.

When the output starts repeating a stretch of the prompt (extraction, quoting, editing, code),
the tokens that followed the latest earlier occurrence of the last n tokens are a good guess for
the next ones. The engine feeds the pending token and that draft in one step, with logits for
each position, and keeps the draft up to the first position where the sampled token differs:
every kept token is one the model chose itself given exactly the tokens before it, so the
output is the plain decoding's (token for token when greedy). A miss costs the extra positions
of one step; a hit saves whole steps, which are what decoding time is made of.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt
from numpy.lib.stride_tricks import sliding_window_view

Tokens = npt.NDArray[np.int32]


def propose(history: Tokens, *, ngram_min: int, ngram_max: int, limit: int) -> list[int]:
    """Up to `limit` tokens that followed the latest earlier occurrence of the longest suffix
    n-gram of `history` (n from `ngram_max` down to `ngram_min`); empty when none recurs."""
    length = len(history)
    for n in range(min(ngram_max, length - 1), ngram_min - 1, -1):
        if n < 1:
            break
        suffix = history[length - n :]
        # Windows starting at 0 .. length-n-1: every occurrence before the suffix itself,
        # each followed by at least one token.
        windows = sliding_window_view(history[: length - 1], n)
        hits = np.flatnonzero((windows == suffix).all(axis=1))
        if len(hits):
            start = int(hits[-1]) + n
            return [int(t) for t in history[start : start + limit]]
    return []


def verify(draft: Sequence[int], choose: Callable[[int], int]) -> list[int]:
    """The tokens decoding keeps from one speculative step. `choose(j)` is the token sampled
    from the logits at position j, i.e. after the pending token and `draft[:j]`. The result is
    the matched prefix of the draft plus the first token where the model disagreed (or the
    token after the whole draft): never empty, at most `len(draft) + 1` tokens."""
    kept: list[int] = []
    for j in range(len(draft) + 1):
        token = choose(j)
        kept.append(token)
        if j == len(draft) or token != draft[j]:
            break
    return kept


def next_limit(limit: int, *, proposed: int, accepted: int, ceiling: int) -> int:
    """The draft length for a sequence's next step: longer after a fully accepted draft,
    shorter after a miss (the heuristic of Hugging Face's assisted generation), so text that
    stops copying soon stops paying for long drafts, and text that copies gets long ones."""
    if proposed == 0:
        return limit
    if accepted == proposed:
        return min(ceiling, limit + 2)
    return max(1, limit - 1)
