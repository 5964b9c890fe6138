"""The replays split over a forked child give what they give in one process, in order; a child
that fails is an error, not half a result."""

from __future__ import annotations

from typing import Any

import pytest

from levergate.analyze.analysis import timing_of
from levergate.analyze.inputs import Input, Skipped
from levergate.analyze.parallel import ReplayFailed, run_all
from levergate.analyze.replay import replay
from tests.unit.analyze.reqs import plan, req


def test_the_forked_half_comes_back_in_order_and_equal() -> None:
    reqs = [req(arrival=float(n), fp=f"fp{n % 7}") for n in range(200)]
    timing = timing_of(Input(reqs, "t", timings=False, skipped=Skipped()))
    plans = [plan(cache={"enabled": on}) for on in (False, True, True)]

    def job(n: int) -> Any:
        return lambda: replay(plans[n], reqs, timing).summary()

    jobs = [job(n) for n in range(3)]
    assert run_all(jobs, fork=True) == run_all(jobs, fork=False)


def test_a_failing_child_is_an_error() -> None:
    def broken() -> dict[str, Any]:
        raise ValueError("boom")

    with pytest.raises(ReplayFailed):
        run_all([dict, broken], fork=True)
