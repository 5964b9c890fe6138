"""Service tiers in the simulator (settings: `TierSettings`): what a request's `service_tier` asks
for, a flex request refused for want of capacity, each tier's latency, and what each tier cost.

    service_tier   absent, "auto", "default", "scale" -> default; "flex"; "priority" or "fast"
                   -> priority; anything else is OpenAI's 400; flex or priority for a model
                   not sold at it is a 400 too
    flex           `slowdown` x the standard latency plus a log-normal queue wait before the
                   first token; refused at once beyond `max_concurrency` flex requests in
                   flight or for a seeded `refusal_rate` share: 429 "Resource unavailable"
                   (OpenAI) or 498 `capacity_exceeded` (Groq), with `retry-after`
    priority       `speedup` x faster than default

Answers carry `service_tier` (chat bodies and every chunk) unless `report` is off. The stats
count requests, refusals, tokens and dollars per tier, at the simulator's own price list
(`tiers.prices`; a model it does not list costs $0): the provider's bill, independent of the
gateway's ledger.
"""

from __future__ import annotations

import enum
import hashlib
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from levergate.policies.pricing import Rates, Tokens, cost
from levergate.simulator.latency import Timing, plan_timing
from levergate.simulator.limits import retry_headers
from levergate.simulator.responses import SimError
from levergate.simulator.settings import FlexSettings, LatencySettings, TierSettings


class SimTier(enum.StrEnum):
    """What an answer says served it (OpenAI's names)."""

    DEFAULT = "default"
    FLEX = "flex"
    PRIORITY = "priority"


def asked(body: Mapping[str, Any], settings: TierSettings, *, model: str) -> SimTier:
    value = body.get("service_tier")
    if value is None or value in ("auto", "default", "scale"):
        return SimTier.DEFAULT
    if value == "fast":  # OpenAI's "Fast mode": served, and answered, as priority
        value = "priority"
    if value not in ("flex", "priority"):
        raise SimError(400, f"Invalid value for 'service_tier': {str(value)[:64]!r}. Supported "
                       "values are: 'auto', 'default', 'flex', 'scale', 'priority' and 'fast'.",
                       param="service_tier", code="invalid_value")  # fmt: skip
    tier = SimTier(value)
    sold = (settings.flex if tier is SimTier.FLEX else settings.priority).models
    if sold is not None and model not in sold:
        raise SimError(400, f"Unsupported service_tier: {value} for model {model[:128]} "
                       "(simulated).", param="service_tier")  # fmt: skip
    return tier


def refusal(settings: FlexSettings, *, in_flight: int, rng: random.Random) -> SimError | None:
    """The flex request is refused (no capacity), or None. The share draws from `rng` only when
    a `refusal_rate` is set, so other draws keep their sequence."""
    full = settings.max_concurrency is not None and in_flight >= settings.max_concurrency
    if not full and not (settings.refusal_rate and rng.random() < settings.refusal_rate):
        return None
    if settings.refusal == "groq":
        return SimError(498, "Flex tier capacity exceeded. This is a known issue; please try "
                        "again later (simulated).", error_type="capacity_exceeded",
                        code="capacity_exceeded", headers=retry_headers(1.0))  # fmt: skip
    return SimError(429, "Resource unavailable: flex processing has no capacity right now. "
                    "Retry later or use the default service tier (simulated).",
                    error_type="requests", code="resource_unavailable",
                    headers=retry_headers(1.0))  # fmt: skip


def request_rng(seed: int, *, model: str, tier: SimTier, prompt: str) -> random.Random:
    """The draws of one request when latencies are `per_request` (LatencySettings)."""
    key = f"{seed}\x00{model}\x00{tier.value}\x00{prompt}".encode()
    return random.Random(int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big"))


def request_timing(
    *, latency: LatencySettings, tiers: TierSettings, tier: SimTier, uncached_tokens: int,
    output_tokens: int, rng: random.Random, extra_ttft: float = 0.0,
) -> Timing:  # fmt: skip
    """The schedule of one answer at `tier`: the standard plan, then the tier's change."""
    base = plan_timing(latency=latency, uncached_tokens=uncached_tokens,
                       output_tokens=output_tokens, rng=rng, extra_ttft=extra_ttft)  # fmt: skip
    if tier is SimTier.PRIORITY and tiers.priority.speedup != 1.0:
        fast = tiers.priority.speedup
        return Timing(base.ttft / fast, tuple(gap / fast for gap in base.gaps))
    if tier is not SimTier.FLEX:
        return base
    flex = tiers.flex
    queue = 0.0
    if flex.queue_ms:
        spread = rng.lognormvariate(0.0, flex.queue_spread) if flex.queue_spread else 1.0
        queue = flex.queue_ms / 1000.0 * spread
    if flex.slowdown == 1.0 and not queue:
        return base
    slow = flex.slowdown
    return Timing(base.ttft * slow + queue, tuple(gap * slow for gap in base.gaps))


@dataclass(slots=True)
class TierCount:
    requests: int = 0
    refused: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    usd: float = 0.0


class TierStats:
    """Per tier: requests answered, refused, their tokens and dollars."""

    def __init__(self) -> None:
        self.by_tier = {tier: TierCount() for tier in SimTier}
        self.flex_in_flight = 0

    def answered(self, tier: SimTier, *, settings: TierSettings, model: str, prompt: int,
                 cached: int, completion: int) -> None:  # fmt: skip
        count = self.by_tier[tier]
        count.requests += 1
        count.prompt_tokens += prompt
        count.completion_tokens += completion
        price = settings.prices.get(model, {}).get(tier.value)
        if price is not None:
            read = price.input if price.cached_input is None else price.cached_input
            rates = Rates(input=price.input, output=price.output, cache_read=read)
            count.usd += cost(Tokens(prompt - cached, cached, 0, completion), rates)

    def snapshot(self) -> dict[str, Any]:
        return {
            tier.value: {"requests": c.requests, "refused": c.refused,
                         "prompt_tokens": c.prompt_tokens,
                         "completion_tokens": c.completion_tokens, "usd": round(c.usd, 9)}
            for tier, c in self.by_tier.items()
        }  # fmt: skip
