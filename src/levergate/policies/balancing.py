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
strategy sees only who is left, so a new one is a class and a line in the registry:
`round_robin` (the baseline every comparison needs) and `affinity` (prefix-cache affinity,
`policies/affinity.py`, which needs the call's prompt and the clock) are.
"""

from __future__ import annotations

import bisect
import itertools
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

import xxhash

from levergate.config import BalanceSettings
from levergate.core.call import Call
from levergate.core.clock import Clock, SystemClock
from levergate.policies import affinity
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
    prefilling: int = 0  # requests sent that have not produced a first token yet


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
        if len(candidates) == 1:
            return candidates[0]  # a lone endpoint: no estimate of the call to make (issue 22)
        index = pick_p2c(
            [c.weight for c in candidates],
            lambda i: candidates[i].load(),
            own_tokens=float(output_cap(call.body)),
            rng=rng,
        )
        return candidates[index]


class RoundRobin:
    """Each candidate in turn, cooling ones only when all are: what a plain load balancer does,
    and the baseline the others are measured against (weights are not looked at)."""

    def __init__(self) -> None:
        self._turn = 0

    def choose(
        self,
        candidates: Sequence[C],
        *,
        call: Call,  # noqa: ARG002 - the Strategy signature; this one needs no call
        rng: random.Random,  # noqa: ARG002 - nor chance
    ) -> C:
        pool = _ready(candidates)
        self._turn += 1
        return pool[self._turn % len(pool)]


class PrefixAffinity:
    """Requests that share a prompt prefix go where it is cached, weighed against the prefill
    work already waiting there (see `policies/affinity.py`)."""

    def __init__(self, settings: BalanceSettings, clock: Clock) -> None:
        a = settings.affinity
        self._block_bytes = a.block_bytes
        self._max_blocks = a.max_blocks
        self._load_factor = a.load_factor
        self._owners = affinity.OwnerTable(ttl=a.ttl_seconds, capacity=a.capacity)
        self._clock = clock
        # The mean uncached prompt (bytes) of the requests sent, over about the last 100: what
        # one request waiting for its first token is expected to hold up.
        self._mean_uncached = 0.0
        self._miss_weight = a.miss_weight

    def choose(
        self,
        candidates: Sequence[C],
        *,
        call: Call,
        rng: random.Random,  # noqa: ARG002 - ties go by rendezvous hashing, the same everywhere
    ) -> C:
        pool = _ready(candidates)
        now = self._clock.now()
        data = affinity.prompt_bytes(call.body)
        digests = affinity.block_digests(
            data, block_bytes=self._block_bytes, max_blocks=self._max_blocks
        )
        depths = self._owners.depths(digests, now=now)
        loads = [c.load() for c in pool]
        bound = affinity.load_bound([x.outstanding for x in loads], load_factor=self._load_factor)
        # (score, uncached bytes, index) of each member under the bound; the least loaded one
        # always is, so there is at least one.
        scored = [
            (x.prefilling * self._mean_uncached + miss * self._miss_weight, miss, i)
            for i, (c, x) in enumerate(zip(pool, loads, strict=True))
            if x.outstanding < bound
            for miss in [len(data) - depths.get(c.name, 0) * self._block_bytes]
        ]
        lowest = min(scored)[0]
        tied = [(miss, pool[i]) for score, miss, i in scored if score == lowest]
        key = digests[0] if digests else xxhash.xxh3_64_intdigest(data)
        miss, chosen = tied[affinity.rendezvous([c.name for _, c in tied], key)]
        self._mean_uncached += (miss - self._mean_uncached) * 0.01
        if digests:
            self._owners.claim(digests, chosen.name, now=now)
        return chosen


def _plain(kind: Callable[[], Strategy]) -> Callable[[BalanceSettings, Clock], Strategy]:
    return lambda _settings, _clock: kind()


# The names `traffic.balance.strategy` accepts (its Literal is pinned to these keys by a test).
STRATEGIES: Mapping[str, Callable[[BalanceSettings, Clock], Strategy]] = {
    "p2c": _plain(PowerOfTwo),
    "least_outstanding": _plain(LeastOutstanding),
    "weighted": _plain(Weighted),
    "round_robin": _plain(RoundRobin),
    "affinity": PrefixAffinity,
}


def strategy_named(
    name: str, *, settings: BalanceSettings | None = None, clock: Clock | None = None
) -> Strategy:
    """A new strategy (each balancer has its own: round robin's turn, affinity's table)."""
    try:
        make = STRATEGIES[name]
    except KeyError:
        raise ValueError(f"unknown balancing strategy {name!r}") from None
    return make(settings or BalanceSettings(), clock or SystemClock())
