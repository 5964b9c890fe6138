"""The latency model: when the first token and each later token of an answer are ready.

    TTFT  = (ttft_ms + prefill_ms_per_token * uncached_prompt_tokens) * J + extra
    gap_i = J_i / tokens_per_second            for each token after the first

J are independent log-normal multipliers (median 1, sigma = `jitter`) from the simulator's
seeded RNG, so a run is reproducible yet has a realistic right tail. Cached prompt tokens skip
prefill, which is how the provider prompt cache shows up as a lower TTFT. A pure function of
settings, token counts and an RNG: no clock, no I/O, property-tested.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from levergate.simulator.settings import LatencySettings


@dataclass(frozen=True, slots=True)
class Timing:
    """Seconds. `gaps[i]` is the wait between output token i and token i + 1."""

    ttft: float
    gaps: tuple[float, ...]

    @property
    def total(self) -> float:
        return self.ttft + sum(self.gaps)

    @property
    def is_zero(self) -> bool:
        return self.ttft == 0 and not any(self.gaps)


ZERO = Timing(ttft=0.0, gaps=())


def plan_timing(
    *,
    latency: LatencySettings,
    uncached_tokens: int,
    output_tokens: int,
    rng: random.Random,
    extra_ttft: float = 0.0,
) -> Timing:
    """The schedule of one answer. Zero latency settings return `ZERO` without touching the RNG,
    which keeps the zero-latency path cheap and its fault sequence independent of timing."""
    if latency.is_zero:
        return ZERO if extra_ttft == 0 else Timing(ttft=extra_ttft, gaps=())
    ttft = (latency.ttft_ms + latency.prefill_ms_per_token * max(0, uncached_tokens)) / 1000.0
    if latency.jitter > 0:
        ttft *= rng.lognormvariate(0.0, latency.jitter)
    gaps: tuple[float, ...] = ()
    if latency.tokens_per_second > 0 and output_tokens > 1:
        step = 1.0 / latency.tokens_per_second
        if latency.jitter > 0:
            sigma = latency.jitter
            gaps = tuple(step * rng.lognormvariate(0.0, sigma) for _ in range(output_tokens - 1))
        else:
            gaps = (step,) * (output_tokens - 1)
    return Timing(ttft=ttft + extra_ttft, gaps=gaps)
