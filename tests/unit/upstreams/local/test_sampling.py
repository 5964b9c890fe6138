"""Token choice: greedy is argmax, the nucleus is the smallest set reaching top_p, a seed
repeats, logit_bias applies."""

from __future__ import annotations

import numpy as np
from hypothesis import example, given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from levergate.upstreams.local.sampling import Sampler, SamplingParams, nucleus

rows = arrays(np.float32, st.integers(2, 600), elements=st.floats(-20, 20, width=32))


@given(rows)
def test_greedy_is_argmax(logits: np.ndarray) -> None:
    sampler = Sampler(SamplingParams(temperature=0.0), rng=np.random.default_rng(0))
    assert sampler.choose(logits) == int(np.argmax(logits))


@given(
    arrays(np.float64, st.integers(1, 400), elements=st.floats(0.0, 1.0)).filter(
        lambda p: p.sum() > 0
    ),
    st.floats(0.01, 0.999),
)
def test_the_nucleus_is_the_smallest_most_likely_set_reaching_top_p(
    weights: np.ndarray, top_p: float
) -> None:
    probs = weights / weights.sum()
    ids = nucleus(probs, top_p)
    assert len(ids) >= 1
    assert len(set(ids.tolist())) == len(ids)
    kept = probs[ids]
    assert (
        kept.sum() >= top_p - 1e-9 or len(ids) == np.count_nonzero(probs) or len(ids) == len(probs)
    )
    assert np.all(np.diff(kept) <= 1e-12)  # most likely first
    outside = np.setdiff1d(np.arange(len(probs)), ids)
    if len(outside):
        assert probs[outside].max() <= kept.min() + 1e-12
    if len(ids) > 1:
        assert kept[:-1].sum() < top_p + 1e-9  # one fewer would not reach top_p


def test_a_seed_repeats_and_the_sample_stays_in_the_nucleus() -> None:
    logits = np.log(np.array([0.5, 0.3, 0.15, 0.05], dtype=np.float32))
    params = SamplingParams(temperature=1.0, top_p=0.8, seed=7)
    draws = {Sampler(params, rng=np.random.default_rng(7)).choose(logits) for _ in range(5)}
    assert len(draws) == 1
    sampler = Sampler(params, rng=np.random.default_rng(1))
    seen = {sampler.choose(logits) for _ in range(200)}
    assert seen == {0, 1}


def test_logit_bias_can_force_or_forbid_a_token() -> None:
    logits = np.array([5.0, 1.0, 0.0], dtype=np.float32)
    forced = Sampler(SamplingParams(logit_bias={2: 100.0}), rng=np.random.default_rng(0))
    assert forced.choose(logits) == 2
    banned = Sampler(SamplingParams(logit_bias={0: -100.0}), rng=np.random.default_rng(0))
    assert banned.choose(logits) == 1
    assert logits[0] == 5.0  # the engine's logits row is never written to


@given(rows, st.integers(1, 8), st.integers(0, 2**32 - 1))
# Two logits that differ by a subnormal share one probability: top-k ranks the logits (CI found it).
@example(np.array([0.0, 1.9649e-41], dtype=np.float32), 1, 0)
def test_a_sample_is_always_among_the_top_k(logits: np.ndarray, top_k: int, seed: int) -> None:
    params = SamplingParams(temperature=1.0, top_p=1.0, top_k=top_k)
    chosen = Sampler(params, rng=np.random.default_rng(seed)).choose(logits)
    # No more than top_k - 1 tokens are strictly likelier than the one chosen.
    assert int(np.sum(logits > logits[chosen])) < top_k
