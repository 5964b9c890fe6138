"""The balancing strategies as pure policies: what each may pick among the candidates left, and
the registry that `traffic.balance.strategy` names them by."""

from __future__ import annotations

import random
import typing
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from levergate.config import BalanceSettings
from levergate.core.call import Call, Context
from levergate.policies.balancing import (
    STRATEGIES,
    LeastOutstanding,
    Load,
    PowerOfTwo,
    Weighted,
    predicted_seconds,
    strategy_named,
)

CALL = Call(kind="chat", body={"model": "m", "max_tokens": 100}, ctx=Context("r"))


@dataclass(frozen=True)
class Fake:
    name: str
    weight: float = 1.0
    cooling: bool = False
    outstanding: int = 0
    ttft: float = 0.0

    def load(self) -> Load:
        return Load(weight=self.weight, outstanding=self.outstanding, ttft=self.ttft)


candidates = st.lists(
    st.builds(
        Fake,
        name=st.text(min_size=1, max_size=4),
        weight=st.floats(0.1, 10.0),
        cooling=st.booleans(),
        outstanding=st.integers(0, 20),
        ttft=st.floats(0.0, 5.0),
    ),
    min_size=1,
    max_size=8,
)


def test_the_registry_holds_every_name_the_config_accepts() -> None:
    field = BalanceSettings.model_fields["strategy"].annotation
    assert set(typing.get_args(field)) == set(STRATEGIES)
    assert isinstance(strategy_named("p2c"), PowerOfTwo)
    with pytest.raises(ValueError, match="unknown balancing strategy"):
        strategy_named("fastest_first")


@settings(max_examples=200, deadline=None)
@given(pool=candidates, seed=st.integers(0, 2**32))
def test_weighted_never_picks_a_cooling_candidate_while_one_is_ready(
    pool: list[Fake], seed: int
) -> None:
    chosen = Weighted().choose(pool, call=CALL, rng=random.Random(seed))
    assert chosen in pool
    if any(not c.cooling for c in pool):
        assert not chosen.cooling


@settings(max_examples=200, deadline=None)
@given(pool=candidates, seed=st.integers(0, 2**32))
def test_least_outstanding_picks_the_least_loaded_ready_candidate(
    pool: list[Fake], seed: int
) -> None:
    chosen = LeastOutstanding().choose(pool, call=CALL, rng=random.Random(seed))
    ready = [c for c in pool if not c.cooling] or pool
    assert chosen in ready

    def score(c: Fake) -> float:
        return (c.outstanding + 1) / c.weight

    assert score(chosen) == min(score(c) for c in ready)


@settings(max_examples=200, deadline=None)
@given(pool=candidates, seed=st.integers(0, 2**32))
def test_p2c_never_picks_the_one_candidate_predicted_slowest(pool: list[Fake], seed: int) -> None:
    chosen = PowerOfTwo().choose(pool, call=CALL, rng=random.Random(seed))
    assert chosen in pool
    times = [predicted_seconds(c.load(), own_tokens=100.0) for c in pool]
    slowest = max(times)
    if len(pool) >= 2 and times.count(slowest) == 1:
        assert predicted_seconds(chosen.load(), own_tokens=100.0) < slowest


def test_p2c_takes_a_lone_candidate_without_estimating_the_call() -> None:
    """One endpoint leaves nothing to compare: the call's output estimate is not worked out
    (a body whose every read fails shows it is not even looked at)."""

    class Unread(dict[str, typing.Any]):
        def get(self, *_: object) -> typing.Any:
            raise AssertionError("the body was read")

    lone = Fake("a")
    call = Call(kind="chat", body=Unread(model="m"), ctx=Context("r"))
    assert PowerOfTwo().choose([lone], call=call, rng=random.Random(0)) is lone
    with pytest.raises(AssertionError, match="the body was read"):
        PowerOfTwo().choose([lone, Fake("b")], call=call, rng=random.Random(0))


def test_weighted_follows_the_weights() -> None:
    heavy, light = Fake("heavy", weight=3.0), Fake("light", weight=1.0)
    rng = random.Random(7)
    picks = [Weighted().choose([heavy, light], call=CALL, rng=rng).name for _ in range(4000)]
    assert 0.7 < picks.count("heavy") / len(picks) < 0.8
