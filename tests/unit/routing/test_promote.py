"""The promotion gate (pure) and the file swap behind promote and rollback."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from levergate.errors import ConfigError
from levergate.routing.curve import measured
from levergate.routing.promote import gate, install, previous_of, rollback

rows = st.integers(min_value=2, max_value=60)


@settings(max_examples=200, deadline=None)
@given(n=rows, seed=st.integers(0, 2**32 - 1), target=st.floats(0.5, 1.0),
       ours=st.floats(-1, 1), theirs=st.floats(-1, 1))  # fmt: skip
def test_the_gate_passes_exactly_when_the_candidate_keeps_the_target_and_saves_enough(
    n: int, seed: int, target: float, ours: float, theirs: float
) -> None:
    rng = np.random.default_rng(seed)
    cheap, strong = rng.integers(0, 2, n).astype(float), np.ones(n)
    a, b = rng.uniform(-1, 1, n), rng.uniform(-1, 1, n)
    result = gate(candidate=(a, ours), current=(b, theirs), cheap=cheap, strong=strong,
                  target=target)  # fmt: skip
    kept, share = measured(a, cheap, strong, ours)
    their_kept, their_share = measured(b, cheap, strong, theirs)
    # A current router below the target is no saving to match: reaching the target is enough.
    saves = share <= their_share + 1e-12 or their_kept < target - 1e-12
    assert result.passed == (kept >= target - 1e-12 and saves)
    assert result.passed == (not result.reasons)
    assert (result.candidate.retention, result.candidate.saving) == (kept, 1 - share)


def test_a_route_without_a_router_saves_nothing_and_keeps_everything() -> None:
    cheap, strong = np.array([1.0, 0.0, 1.0, 1.0]), np.ones(4)
    result = gate(candidate=(np.array([0.0, 1.0, 0.0, 0.0]), 0.5), current=None, cheap=cheap,
                  strong=strong, target=0.95)  # fmt: skip
    assert result.passed
    assert (result.current.saving, result.current.retention) == (0.0, 1.0)
    assert result.candidate.saving == 0.75
    with pytest.raises(ConfigError, match="no labels"):
        gate(candidate=(np.array([]), 0.5), current=None, cheap=np.array([]),
             strong=np.array([]), target=0.9)  # fmt: skip


def test_install_keeps_the_replaced_file_and_rollback_swaps_back(tmp_path: Path) -> None:
    route_file, first, second = tmp_path / "r.json", tmp_path / "a.json", tmp_path / "b.json"
    first.write_text("A")
    second.write_text("B")
    with pytest.raises(ConfigError, match=r"r\.json\.previous does not exist"):
        rollback(route_file)
    install(first, route_file)
    assert route_file.read_text() == "A"
    assert not previous_of(route_file).exists()
    install(second, route_file)
    assert (route_file.read_text(), previous_of(route_file).read_text()) == ("B", "A")
    rollback(route_file)
    assert (route_file.read_text(), previous_of(route_file).read_text()) == ("A", "B")
    rollback(route_file)  # a second rollback undoes the first
    assert route_file.read_text() == "B"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "b.json", "r.json",
                                                          "r.json.previous"]  # fmt: skip
