"""Choosing the next token from a row of logits: greedy, or temperature + top-k + nucleus (top-p).

numpy over the float32 row that llama.cpp exposes, with no copy: each sequence has its own
generator, seeded by the request's `seed` when it has one, so a seeded sampled request gives the
same answer again whatever else is in the batch. The nucleus is searched among the highest
candidates first (an `argpartition`, not a sort of the whole 49k vocabulary), which keeps the
per-token cost well under a millisecond.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

Logits = npt.NDArray[np.float32]
# Candidates searched for the nucleus before falling back to a full sort.
NUCLEUS_CANDIDATES = 256


@dataclass(frozen=True, slots=True)
class SamplingParams:
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0  # 0: every token is a candidate
    seed: int | None = None
    logit_bias: Mapping[int, float] = field(default_factory=dict)

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


class Sampler:
    def __init__(self, params: SamplingParams, *, rng: np.random.Generator) -> None:
        self.params = params
        self._rng = rng
        self._bias_ids = np.fromiter(params.logit_bias.keys(), dtype=np.int64)
        self._bias_values = np.fromiter(params.logit_bias.values(), dtype=np.float32)

    def choose(self, logits: Logits) -> int:
        if len(self._bias_ids):
            logits = logits.copy()
            valid = self._bias_ids < len(logits)
            logits[self._bias_ids[valid]] += self._bias_values[valid]
        if self.params.greedy:
            return int(np.argmax(logits))
        return self._sample(logits)

    def _sample(self, logits: Logits) -> int:
        scaled = logits.astype(np.float64) / self.params.temperature
        scaled -= scaled.max()
        probs = np.exp(scaled)
        probs /= probs.sum()
        top_k = self.params.top_k
        if 0 < top_k < len(probs):
            kept = np.zeros_like(probs)
            # Ranked by the logits themselves: two logits that differ can round to one
            # probability, and top-k is defined on the logits.
            best = np.argpartition(-logits, top_k - 1)[:top_k]
            kept[best] = probs[best]
            probs = kept / kept.sum()
        ids = nucleus(probs, self.params.top_p)
        chosen = probs[ids] / probs[ids].sum()
        return int(ids[self._rng.choice(len(ids), p=chosen)])


def nucleus(probs: npt.NDArray[np.float64], top_p: float) -> npt.NDArray[np.int64]:
    """The smallest set of most likely ids whose probabilities add up to at least `top_p`,
    most likely first (always at least one id)."""
    if top_p >= 1.0:
        return np.flatnonzero(probs > 0).astype(np.int64)
    count = min(NUCLEUS_CANDIDATES, len(probs))
    candidates = np.argpartition(-probs, count - 1)[:count]
    order = candidates[np.argsort(-probs[candidates], kind="stable")]
    cumulative = np.cumsum(probs[order])
    if cumulative[-1] < top_p and count < len(probs):
        order = np.argsort(-probs, kind="stable")
        cumulative = np.cumsum(probs[order])
    keep = int(np.searchsorted(cumulative, top_p)) + 1
    return order[: min(keep, len(order))].astype(np.int64)
