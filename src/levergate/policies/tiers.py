"""Service tiers: the same model sold at several speeds and prices, and the choice among them by
a request's deadline. Pure values and functions; the Tiers layer (layers/tiers/) feeds them
from the catalog's prices and the latencies it observed, the async requests from the deferral.

    batch       the provider's batch API: ~half price, answers within 24 h (deferral)
    flex        OpenAI `service_tier: "flex"`: Batch API rates, slower, sometimes refused at
                once (429 "resource unavailable"; Groq: 498 `capacity_exceeded`)
    standard    the default tier (OpenAI `"default"`, Anthropic `"standard"`)
    priority    OpenAI `"priority"`: faster and steadier, at a premium

## The choice (`choose`)
Among the tiers the route allows (at most its price `ceiling`; priority only for interactive
requests), the one with the lowest *expected* cost whose latency at the configured confidence
(`Option.seconds`, a per-tier per-model estimate from observed answers, or the prior until there
are enough) plus any wait before it may be tried (`Option.wait`, a refused tier's cool-down)
fits in the time left. A tier the provider sometimes refuses (`refusals`, the share of recent
attempts refused) is eligible only when a dearer tier could still answer in time after the
refusal (refusals come back at once), and its expected cost counts the rescue:
`(1 - p) * cost + p * rescue cost`. Ties go to the faster tier. With no deadline the answer is
standard; when no tier fits, the fastest allowed (for an interactive request that is priority,
if the route allows it: "a priority answer only for interactive requests that would otherwise
miss their deadline").

Properties (tests/properties/test_tiers.py): the choice is always allowed; when a tier fits the
choice fits and none fitting is cheaper in expectation; more time never costs more; no deadline
is standard.

## The latency estimate (`LatencyPrior`, `Samples`)
A tier's latency for a request (its prompt estimate, its output cap) is the prior's median for
that size times a ratio's quantile: the observed ratios `latency / prior median` of the last
answers (nearest rank, so a small sample errs slow), or, with fewer than `min_samples` of
them, the prior's own log-normal spread. So the prior carries the size model — prompt tokens
and output tokens apart, since a provider decodes an output token a hundred times slower than
it reads a prompt token — and the observations calibrate it per model and tier.
"""

from __future__ import annotations

import enum
import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

__all__ = [
    "ALLOWED_SERVICE_TIERS", "Ask", "Choice", "LatencyPrior", "Option", "Samples", "Tier",
    "TierDecision", "allowed", "asked_tier", "choose", "served_tier", "wire_tier",
]  # fmt: skip


class Tier(enum.StrEnum):
    """A price tier; its value is what the request record and the metrics say."""

    BATCH = "batch"
    FLEX = "flex"
    STANDARD = "standard"
    PRIORITY = "priority"

    @property
    def rank(self) -> int:
        """Price order: batch and flex (about half), standard, priority (a premium)."""
        return _RANK[self]


_RANK = {Tier.BATCH: 0, Tier.FLEX: 1, Tier.STANDARD: 2, Tier.PRIORITY: 3}

# What a client may send as `service_tier` (OpenAI's values, as its SDK types them): `auto`
# leaves it to the provider (the project's default), `default` is standard, `fast` asks for
# priority ("Fast mode": the answer says `priority`), `scale` is Scale Tier capacity a customer
# prepaid (priced here as standard: its price is not per token).
ALLOWED_SERVICE_TIERS = ("auto", "default", "flex", "priority", "fast", "scale")
_ASKED = {"default": Tier.STANDARD, "flex": Tier.FLEX, "priority": Tier.PRIORITY,
          "fast": Tier.PRIORITY, "scale": Tier.STANDARD}  # fmt: skip
# What an OpenAI-compatible upstream is sent for each tier.
_WIRE = {Tier.STANDARD: "default", Tier.FLEX: "flex", Tier.PRIORITY: "priority"}
# What answers say they were served at: OpenAI (`default`, `flex`, `priority`), Anthropic's
# `usage.service_tier` (`standard`, `priority`, `batch`), Groq (`on_demand`, `flex`).
_SERVED = {
    "default": Tier.STANDARD, "standard": Tier.STANDARD, "on_demand": Tier.STANDARD,
    "scale": Tier.STANDARD,
    "flex": Tier.FLEX, "priority": Tier.PRIORITY, "batch": Tier.BATCH,
}  # fmt: skip


def asked_tier(value: str) -> Tier | None:
    """The tier a client's `service_tier` asks for (one of `ALLOWED_SERVICE_TIERS`); None for
    `auto`."""
    return _ASKED.get(value)


def wire_tier(tier: Tier) -> str:
    """The `service_tier` value an OpenAI-compatible upstream is sent (batch has none)."""
    return _WIRE[tier]


def served_tier(answer: Mapping[str, Any] | None) -> Tier | None:
    """The tier an answer (a chat completion, one of its chunks, a Responses object or a
    translated Anthropic answer) says served it: its `service_tier`, else its usage's; None when
    it says nothing we know. Asked of every whole answer: its objects are checked as the parsed
    JSON's dicts (an ABC's `isinstance` is a Python call each)."""
    if not answer:
        return None
    value = answer.get("service_tier")
    if value is None:
        usage = answer.get("usage")
        value = usage.get("service_tier") if isinstance(usage, dict) else None
    if value is None and isinstance(inner := answer.get("response"), dict):
        return served_tier(inner)  # a Responses stream event carries the response object
    return _SERVED.get(value) if isinstance(value, str) else None


# ---- the latency estimate ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LatencyPrior:
    """A tier's latency before anything was observed: a log-normal whose median grows with the
    request's size. `seconds` is the median of a request of no tokens; each thousand prompt
    tokens add `per_1k_prompt`, each thousand output tokens `per_1k_output`; `spread` is the
    log-normal sigma."""

    seconds: float
    per_1k_prompt: float = 0.0
    per_1k_output: float = 0.0
    spread: float = 0.5

    def median(self, prompt: int, output: int) -> float:
        return (
            self.seconds
            + (self.per_1k_prompt * max(0, prompt) + self.per_1k_output * max(0, output)) / 1000.0
        )

    def ratio(self, confidence: float) -> float:
        """The prior's quantile as a multiple of its median."""
        return math.exp(self.spread * z(confidence))


def z(confidence: float) -> float:
    """The standard normal quantile (0 < confidence < 1)."""
    return NormalDist().inv_cdf(confidence)


class Samples:
    """The last `size` observed ratios (latency / prior median) of one model and tier."""

    __slots__ = ("_ratios",)

    def __init__(self, size: int) -> None:
        self._ratios: deque[float] = deque(maxlen=size)

    def __len__(self) -> int:
        return len(self._ratios)

    def add(self, ratio: float) -> None:
        if math.isfinite(ratio) and ratio >= 0:
            self._ratios.append(ratio)

    def quantile(self, confidence: float) -> float:
        """Nearest rank (the sample at or above `confidence` of them): errs slow."""
        ordered = sorted(self._ratios)
        at = min(len(ordered) - 1, max(0, math.ceil(confidence * len(ordered)) - 1))
        return ordered[at]


def estimate(
    prior: LatencyPrior, samples: Samples | None, *, prompt: int, output: int,
    confidence: float, min_samples: int, borrowed: float | None = None,
) -> float:  # fmt: skip
    """Seconds a request of this size takes at `confidence` (module docstring). With too few
    samples of its own, the ratio is `borrowed` when given (priority borrows standard's
    observed ratio: a tier sold as faster, whose prior says how much, is used too seldom to
    learn its own, and its prior spread alone would make it look slower than standard)."""
    if samples is not None and len(samples) >= min_samples:
        ratio = samples.quantile(confidence)
    elif borrowed is not None:
        ratio = borrowed
    else:
        ratio = prior.ratio(confidence)
    return prior.median(prompt, output) * ratio


# ---- the choice ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Option:
    """One tier for this request: its estimated dollars, its latency at the confidence, the
    wait before it may be tried, and the share of its recent attempts the provider refused."""

    tier: Tier
    cost: float
    seconds: float
    wait: float = 0.0
    refusals: float = 0.0

    @property
    def done_by(self) -> float:
        return self.wait + self.seconds


@dataclass(frozen=True, slots=True)
class Ask:
    """What the request allows: the seconds left to its deadline (None: no deadline), whether
    it is interactive (the only class priority may serve), and the route's price ceiling."""

    remaining: float | None
    interactive: bool = False
    ceiling: Tier = Tier.STANDARD


@dataclass(frozen=True, slots=True)
class Choice:
    """The tier chosen, why, and whether its estimate fits the deadline."""

    tier: Tier
    reason: str
    fits: bool
    expected_cost: float


@dataclass(frozen=True, slots=True)
class TierDecision:
    """How a request's tier was decided, for its record: `asked` is the client's own
    `service_tier` (then `chosen` is exactly that), else the policy chose `chosen` for `reason`
    with `seconds` left to the deadline (None: none); `refused` lists the tiers the provider
    refused on the way, in order (each re-decided); `hedged` the faster tier asked beside the
    chosen one when that had not answered by the latest moment the faster one could still meet
    the deadline (layers/tiers/hedge.py; the record's `tier` says which answered)."""

    chosen: Tier | None
    reason: str
    asked: str | None = None
    seconds: float | None = None
    refused: tuple[Tier, ...] = ()
    hedged: Tier | None = None


EXPLICIT = "asked by the client"
NO_DEADLINE = "no deadline"
IN_TIME = "cheapest in time"
NONE_IN_TIME = "none in time: fastest"


def allowed(options: Iterable[Option], ask: Ask) -> list[Option]:
    return [
        o for o in options
        if o.tier.rank <= ask.ceiling.rank and (o.tier is not Tier.PRIORITY or ask.interactive)
    ]  # fmt: skip


def choose(options: Sequence[Option], ask: Ask) -> Choice:
    """The tier for this request (module docstring). `options` must hold standard, which is
    also the answer when the route's ceiling leaves no priced tier (`flex` on a model without a
    flex price): the start-up log says so (layers/tiers/book.py)."""
    standard = next((o for o in options if o.tier is Tier.STANDARD), None)
    if standard is None:
        raise ValueError("the options must include the standard tier")
    usable = allowed(options, ask) or [standard]
    remaining = ask.remaining
    if remaining is None:
        steady = standard if standard in usable else min(usable, key=lambda o: o.cost)
        return Choice(steady.tier, NO_DEADLINE, fits=True, expected_cost=steady.cost)
    priced = _eligible(usable, remaining)
    if priced:
        best, cost = min(priced, key=lambda pair: (pair[1], pair[0].done_by, pair[0].tier.rank))
        return Choice(best.tier, IN_TIME, fits=True, expected_cost=cost)
    fastest = min(usable, key=lambda o: (o.done_by, o.refusals, -o.tier.rank))
    return Choice(fastest.tier, NONE_IN_TIME, fits=False, expected_cost=fastest.cost)


def _eligible(usable: Sequence[Option], remaining: float) -> list[tuple[Option, float]]:
    """(option, expected cost) of each option that meets the deadline, rescue included."""
    found = []
    for option in usable:
        if option.done_by > remaining:
            continue
        if option.refusals <= 0:
            found.append((option, option.cost))
            continue
        rescues = [r.cost for r in usable
                   if r.tier.rank > option.tier.rank and r.refusals <= 0
                   and r.done_by <= remaining]  # fmt: skip
        if rescues:
            p = min(1.0, option.refusals)
            found.append((option, (1.0 - p) * option.cost + p * min(rescues)))
    return found
