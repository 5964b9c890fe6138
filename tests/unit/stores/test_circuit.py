"""The circuit between requests and a shared store: after a failure nobody waits on the store
for the cool-down, then exactly one caller tries it while the others still skip it."""

from __future__ import annotations

from levergate.stores.circuit import Circuit
from levergate.testing import ManualClock


def test_one_trial_at_a_time_after_the_cooldown() -> None:
    clock = ManualClock()
    circuit = Circuit(cooldown=5, clock=clock)
    assert all(circuit.admits() for _ in range(3))  # closed: everyone uses the store
    assert circuit.failed() is True  # a new outage
    assert circuit.failed() is False  # the same one, seen by a caller already in flight
    assert not circuit.closed
    assert not any(circuit.admits() for _ in range(3))
    clock.advance(5)
    assert circuit.admits()  # the trial
    assert not any(circuit.admits() for _ in range(3))  # the others, while it is in flight
    circuit.failed()
    assert not circuit.admits()
    clock.advance(5)
    assert circuit.admits()
    circuit.abandoned()  # cancelled: no verdict, the next caller tries
    assert circuit.admits()
    assert circuit.succeeded() is True  # the store is back
    assert circuit.closed
    assert circuit.succeeded() is False
    assert all(circuit.admits() for _ in range(3))
