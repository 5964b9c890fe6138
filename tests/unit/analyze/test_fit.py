"""The latency fit recovers the simulator's own model from timings it generated, and holds a
slope the data makes negative at zero."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from levergate.analyze.fit import ASSUMED, Latency, Point, fit, fit_models, solve

sizes = st.lists(st.tuples(st.integers(0, 20_000), st.integers(1, 2_000)), min_size=8,
                 max_size=40, unique_by=lambda t: t[0])  # fmt: skip


@given(sizes, st.floats(0, 2000), st.floats(0, 2), st.floats(5, 500))
def test_streams_give_back_the_model_that_timed_them(
    shapes: list[tuple[int, int]], base: float, prefill: float, tps: float
) -> None:
    truth = Latency(base, prefill, tps)
    points = [Point(u, o, truth.ttft(u), truth.total(u, o)) for u, o in shapes]
    got = fit(points)
    assert got is not None
    assert got.fitted
    assert got.ttft_ms == pytest.approx(base, abs=1e-3)
    assert got.prefill_ms_per_token == pytest.approx(prefill, abs=1e-6)
    assert got.tokens_per_second == pytest.approx(tps, rel=1e-6)


def test_whole_answers_fit_all_three_from_totals() -> None:
    truth = Latency(300.0, 0.25, 50.0)
    shapes = [(u, o) for u in (100, 2_000, 9_000) for o in (10, 200, 800)]
    got = fit([Point(u, o, None, truth.total(u, o)) for u, o in shapes])
    assert got is not None
    assert got.ttft_ms == pytest.approx(300.0, rel=1e-6)
    assert got.prefill_ms_per_token == pytest.approx(0.25, rel=1e-6)
    assert got.tokens_per_second == pytest.approx(50.0, rel=1e-6)


def test_a_negative_slope_is_held_at_zero() -> None:
    # Longer prompts answered faster (a prompt cache the log does not show): no negative cost.
    points = [Point(u, 10, 1.0 - u / 100_000, 2.0) for u in range(0, 50_000, 5_000)]
    got = fit(points)
    assert got is not None
    assert got.prefill_ms_per_token == 0.0
    assert got.ttft_ms == pytest.approx(1000.0 * sum(p.ttft or 0 for p in points) / len(points))


def test_too_few_samples_take_the_overall_fit_or_the_assumed_one() -> None:
    assert fit([Point(1, 1, 0.1, 0.2)]) is None
    models, overall = fit_models([("a", Point(1, 1, 0.1, 0.2))])
    assert overall == ASSUMED
    assert models["a"] == ASSUMED


def test_solve_is_none_for_a_singular_system() -> None:
    assert solve([[1.0, 2.0], [2.0, 4.0]], [1.0, 2.0]) is None
    assert solve([[1.0, 0.0], [0.0, 2.0]], [3.0, 4.0]) == pytest.approx([3.0, 2.0])
