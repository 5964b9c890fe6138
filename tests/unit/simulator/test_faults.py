"""Fault selection: forced by header, or drawn from seeded rates."""

from __future__ import annotations

import random
from collections import Counter

import orjson
import pytest
from pydantic import ValidationError

from levergate.simulator.faults import Fault, draw, malformed_body, parse_forced
from levergate.simulator.settings import FaultSettings


@pytest.mark.parametrize("value", ["500", "503", "429", "hang", "disconnect", "malformed", "slow"])
def test_every_documented_header_value_forces_its_fault(value: str) -> None:
    assert parse_forced(value) == Fault(value)
    assert parse_forced(f" {value.upper()} ") == Fault(value)


def test_unknown_header_values_are_refused_with_the_valid_list() -> None:
    assert parse_forced(None) is None
    with pytest.raises(ValueError, match="hang"):
        parse_forced("explode")


def test_no_rates_means_no_draws_from_the_rng() -> None:
    rng = random.Random(3)
    state = rng.getstate()
    assert draw(settings=FaultSettings(), rng=rng) is None
    assert rng.getstate() == state


def test_draws_are_reproducible_and_follow_the_rates() -> None:
    settings = FaultSettings(error_rate=0.2, hang_rate=0.1, malformed_rate=0.1)
    first = [draw(settings=settings, rng=random.Random(5)) for _ in range(1)]
    assert first == [draw(settings=settings, rng=random.Random(5))]
    rng = random.Random(11)
    counts = Counter(draw(settings=settings, rng=rng) for _ in range(20_000))
    assert counts[None] == pytest.approx(12_000, rel=0.05)
    assert counts[Fault.ERROR_500] + counts[Fault.ERROR_503] == pytest.approx(4_000, rel=0.1)
    assert counts[Fault.HANG] == pytest.approx(2_000, rel=0.1)
    assert counts[Fault.DISCONNECT] == 0


def test_rates_are_exclusive_and_must_sum_to_at_most_one() -> None:
    with pytest.raises(ValidationError):
        FaultSettings(error_rate=0.6, hang_rate=0.6)
    assert (
        draw(settings=FaultSettings(disconnect_rate=1.0), rng=random.Random()) is Fault.DISCONNECT
    )


@pytest.mark.parametrize("stream", [False, True])
def test_malformed_bodies_are_not_json(stream: bool) -> None:
    body = malformed_body(stream=stream)
    payload = body.removeprefix(b"data: ").strip()
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(payload)
