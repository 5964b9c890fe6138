"""The latency model: TTFT from base + prefill, decode gaps from the token rate, seeded jitter."""

from __future__ import annotations

import math
import random

from hypothesis import given
from hypothesis import strategies as st

from levergate.simulator.latency import ZERO, plan_timing
from levergate.simulator.settings import LatencySettings


def test_zero_latency_is_the_fast_path_and_leaves_the_rng_alone() -> None:
    rng = random.Random(1)
    state = rng.getstate()
    timing = plan_timing(
        latency=LatencySettings(), uncached_tokens=5000, output_tokens=100, rng=rng
    )
    assert timing is ZERO
    assert timing.total == 0
    assert rng.getstate() == state


def test_ttft_is_base_plus_prefill_and_gaps_follow_the_token_rate() -> None:
    latency = LatencySettings(ttft_ms=100, prefill_ms_per_token=0.5, tokens_per_second=50)
    timing = plan_timing(
        latency=latency, uncached_tokens=200, output_tokens=11, rng=random.Random()
    )
    assert math.isclose(timing.ttft, 0.2)
    assert timing.gaps == (0.02,) * 10
    assert math.isclose(timing.total, 0.4)


def test_slow_fault_adds_to_ttft_even_at_zero_latency() -> None:
    timing = plan_timing(
        latency=LatencySettings(),
        uncached_tokens=1,
        output_tokens=1,
        rng=random.Random(),
        extra_ttft=2,
    )
    assert timing.ttft == 2


def test_jitter_is_reproducible_for_a_seed() -> None:
    latency = LatencySettings(ttft_ms=100, tokens_per_second=100, jitter=0.3)
    one = plan_timing(latency=latency, uncached_tokens=0, output_tokens=20, rng=random.Random(7))
    two = plan_timing(latency=latency, uncached_tokens=0, output_tokens=20, rng=random.Random(7))
    assert one == two
    assert len(set(one.gaps)) > 1


@given(
    ttft=st.floats(0, 5000),
    prefill=st.floats(0, 5),
    rate=st.floats(0, 1000),
    jitter=st.floats(0, 2),
    fresh=st.integers(0, 100_000),
    cached=st.integers(0, 100_000),
    output=st.integers(0, 300),
    seed=st.integers(0, 2**32),
)
def test_timing_invariants(
    *, ttft: float, prefill: float, rate: float, jitter: float,
    fresh: int, cached: int, output: int, seed: int,
) -> None:  # fmt: skip
    latency = LatencySettings(
        ttft_ms=ttft, prefill_ms_per_token=prefill, tokens_per_second=rate, jitter=jitter
    )
    timing = plan_timing(
        latency=latency, uncached_tokens=fresh, output_tokens=output, rng=random.Random(seed)
    )
    assert timing.ttft >= 0
    assert all(gap >= 0 for gap in timing.gaps)
    assert len(timing.gaps) in (0, max(0, output - 1))
    if jitter == 0:
        # Cached tokens skip prefill, so more cache never means a later first token.
        more_cached = plan_timing(
            latency=latency,
            uncached_tokens=max(0, fresh - cached),
            output_tokens=output,
            rng=random.Random(seed),
        )
        assert more_cached.ttft <= timing.ttft
