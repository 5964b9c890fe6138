"""Hard prompts and token logprobs: what lets a cascade be tested end to end against the
simulator. Pure, and only reached when a request asks for logprobs or hard prompts are
configured (`HardPromptSettings.enabled`), so the throughput path pays one dict lookup.

Logprobs follow OpenAI's chat wire shape: `choices[i].logprobs = {"content": [{"token",
"logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}, ...]}, ...], "refusal":
null}` on a whole answer, and the same with one entry per content chunk of a stream. Token
logprobs are a deterministic function of the prompt's hardness and the token's position:
spread around the configured mean (x0.25 .. x1.75), so their mean is the configured one and the
least likely token of a hard answer is clearly below an easy answer's.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from typing import Any

from levergate.simulator.settings import HardPromptSettings

# OpenAI's bound on `top_logprobs`.
MAX_TOP_LOGPROBS = 20
_SPREAD = 1000
_ALTERNATIVES = (
    " it", " the", " of", " and", " a", " to", " in", " is", " that", " for",
    " on", " was", " with", " as", " be", " by", " at", " or", " an", " we",
)  # fmt: skip


def is_hard(settings: HardPromptSettings, *, model: str, text: str, seed: int) -> bool:
    if model in settings.strong_models:
        return False
    if settings.marker is not None and settings.marker in text:
        return True
    if settings.share <= 0:
        return False
    digest = hashlib.blake2b(b"%d\x00%b" % (seed, text.encode()), digest_size=8).digest()
    return int.from_bytes(digest, "little") / 2.0**64 < settings.share


def mean_logprob(settings: HardPromptSettings, *, hard: bool) -> float:
    return settings.hard_logprob if hard else settings.easy_logprob


def token_logprobs(count: int, *, mean: float, salt: int) -> list[float]:
    """`count` logprobs averaging `mean` (each in [1.75 * mean, 0.25 * mean])."""
    values = []
    for i in range(count):
        spread = ((i * 2654435761 + salt) % _SPREAD) / _SPREAD  # Knuth's multiplicative hash
        values.append(round(mean * (0.25 + 1.5 * spread), 6))
    if count:  # shift by the drift of the hash so the mean is exactly the configured one
        drift = mean - math.fsum(values) / count
        values = [min(0.0, round(v + drift, 6)) for v in values]
    return values


def json_tokens(tokens: Sequence[str], *, mean: float, hard: bool) -> list[str]:
    """The answer's words as a JSON answer with a self-reported confidence, still one token per
    word (the wrapping rides on the first and last): a hard answer's closing brace is missing."""
    if not tokens:
        return []
    out = list(tokens)
    confidence = round(math.exp(mean), 2)
    out[0] = '{"answer": "' + out[0]
    out[-1] = f'{out[-1]}", "confidence": {confidence}' + ("" if hard else "}")
    return out


def content_entry(token: str, logprob: float, *, top: int) -> dict[str, Any]:
    """One `logprobs.content` entry: the token, then `top` alternatives, most likely first."""
    alternatives: list[dict[str, Any]] = []
    if top:
        alternatives.append({"token": token, "logprob": logprob, "bytes": list(token.encode())})
        others = [a for a in _ALTERNATIVES if a != token][: top - 1]
        for j, alt in enumerate(others):
            lp = round(logprob - 0.5 * (j + 1), 6)
            alternatives.append({"token": alt, "logprob": lp, "bytes": list(alt.encode())})
    return {
        "token": token,
        "logprob": logprob,
        "bytes": list(token.encode()),
        "top_logprobs": alternatives,
    }


def choice_logprobs(
    tokens: Sequence[str], logprobs: Sequence[float], *, top: int
) -> dict[str, Any]:
    return {
        "content": [content_entry(t, lp, top=top) for t, lp in zip(tokens, logprobs, strict=True)],
        "refusal": None,
    }
