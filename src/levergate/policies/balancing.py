"""Choosing an endpoint: weighted random, least outstanding, and power of two choices on the
predicted completion time.

P2C (Mitzenmacher; tower's `p2c`, Finagle's `P2CLeastLoaded`) samples two candidates and keeps
the better one: nearly the quality of scanning every endpoint, without every gateway stampeding
onto the same "best" one between updates. The score is a predicted completion time in seconds:

    wait (limiter backlog, quota reset, cooldown after a 429)
    + (TTFT EWMA + (queued tokens + own tokens) / observed tokens-per-second) * (2 - headroom)

where headroom is the share of the provider's quota left (`x-ratelimit-remaining-*` over the
limit; 1 when unknown), so of two equally fast keys the fuller one wins. Weights bias which
two are sampled. Everything here is pure; the caller passes `random.Random`.
"""

from __future__ import annotations

import bisect
import itertools
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Load:
    """What the balancer knows about one candidate at the moment of choosing."""

    weight: float = 1.0
    outstanding: int = 0
    queued_tokens: float = 0.0
    ttft: float = 0.0
    tokens_per_second: float = 0.0
    wait: float = 0.0
    headroom: float = 1.0


def predicted_seconds(load: Load, *, own_tokens: float) -> float:
    """Lower is better. An unmeasured speed contributes nothing yet (optimistic start)."""
    decode = 0.0
    if load.tokens_per_second > 0:
        decode = (load.queued_tokens + own_tokens) / load.tokens_per_second
    headroom = min(1.0, max(0.0, load.headroom))
    return load.wait + (load.ttft + decode) * (2.0 - headroom)


def pick_weighted(weights: Sequence[float], *, rng: random.Random) -> int:
    """An index drawn with probability proportional to its weight."""
    if not weights:
        raise ValueError("no candidates")
    cumulative = list(itertools.accumulate(weights))
    point = rng.random() * cumulative[-1]
    return min(bisect.bisect_right(cumulative, point), len(weights) - 1)


def pick_least_outstanding(loads: Sequence[Load], *, rng: random.Random) -> int:
    """Fewest requests in flight per unit of weight; ties broken at random."""
    if not loads:
        raise ValueError("no candidates")
    scores = [(load.outstanding + 1) / load.weight for load in loads]
    best = min(scores)
    ties = [i for i, score in enumerate(scores) if score == best]
    return ties[0] if len(ties) == 1 else rng.choice(ties)


def pick_p2c(
    weights: Sequence[float],
    load_of: Callable[[int], Load],
    *,
    own_tokens: float,
    rng: random.Random,
) -> int:
    """Two distinct candidates sampled by weight; the one predicted to finish sooner. Loads are
    asked for only for the two sampled (`load_of(index)`), so a large pool costs no more."""
    if not weights:
        raise ValueError("no candidates")
    if len(weights) == 1:
        return 0
    first = pick_weighted(weights, rng=rng)
    rest = [i for i in range(len(weights)) if i != first]
    second = rest[pick_weighted([weights[i] for i in rest], rng=rng)]
    a = predicted_seconds(load_of(first), own_tokens=own_tokens)
    b = predicted_seconds(load_of(second), own_tokens=own_tokens)
    if a == b:
        return first if rng.random() < 0.5 else second
    return first if a < b else second
