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

Each way of choosing is a `Strategy` — `choose(candidates, call=, rng=)` returns one of the
candidates — registered by the name `traffic.balance.strategy` accepts (`STRATEGIES`). The
balancer has already left out ejected endpoints and the ones that failed this request; a
strategy sees only who is left, so a new one (prefix or cache affinity, which needs the call's
prompt) is a class and a line in the registry.
"""

from __future__ import annotations

import bisect
import itertools
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from levergate.core.call import Call
from levergate.policies.estimate import output_cap


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


class Candidate(Protocol):
    """One member of a pool as a strategy sees it, at the moment of choosing."""

    @property
    def name(self) -> str: ...

    @property
    def weight(self) -> float: ...

    @property
    def cooling(self) -> bool:
        """Under a cooldown (after a 429 or an exhausted quota)."""
        ...

    def load(self) -> Load: ...


C = TypeVar("C", bound=Candidate)


class Strategy(Protocol):
    def choose(self, candidates: Sequence[C], *, call: Call, rng: random.Random) -> C:
        """One of `candidates` (never empty) for this attempt."""
        ...


def _ready(candidates: Sequence[C]) -> Sequence[C]:
    """The candidates not cooling down, or all of them when every one is."""
    ready = [c for c in candidates if not c.cooling]
    return ready or candidates


class Weighted:
    """Random, in proportion to the weights; cooling candidates only when all are."""

    def choose(
        self,
        candidates: Sequence[C],
        *,
        call: Call,  # noqa: ARG002 - the Strategy signature; this one needs no call
        rng: random.Random,
    ) -> C:
        pool = _ready(candidates)
        return pool[pick_weighted([c.weight for c in pool], rng=rng)]


class LeastOutstanding:
    """Fewest requests in flight per unit of weight; cooling candidates only when all are."""

    def choose(
        self,
        candidates: Sequence[C],
        *,
        call: Call,  # noqa: ARG002 - the Strategy signature; this one needs no call
        rng: random.Random,
    ) -> C:
        pool = _ready(candidates)
        return pool[pick_least_outstanding([c.load() for c in pool], rng=rng)]


class PowerOfTwo:
    """P2C on the predicted completion time, which counts a cooldown as wait (so a cooling
    candidate is not left out: it loses the comparison by as much as it has left to wait)."""

    def choose(self, candidates: Sequence[C], *, call: Call, rng: random.Random) -> C:
        index = pick_p2c(
            [c.weight for c in candidates],
            lambda i: candidates[i].load(),
            own_tokens=float(output_cap(call.body)),
            rng=rng,
        )
        return candidates[index]


# The names `traffic.balance.strategy` accepts (its Literal is pinned to these keys by a test).
STRATEGIES: Mapping[str, Callable[[], Strategy]] = {
    "p2c": PowerOfTwo,
    "least_outstanding": LeastOutstanding,
    "weighted": Weighted,
}


def strategy_named(name: str) -> Strategy:
    try:
        return STRATEGIES[name]()
    except KeyError:
        raise ValueError(f"unknown balancing strategy {name!r}") from None
