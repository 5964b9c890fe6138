from __future__ import annotations

import socket

import pytest

from levergate.testing import ports
from levergate.testing.ports import free_port


def test_a_free_port_is_below_the_ephemeral_range_and_can_be_bound() -> None:
    port = free_port()
    assert ports.LOW <= port < ports.HIGH < 32768  # Linux's ephemeral ports start at 32768
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_a_port_in_use_is_passed_over(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as held:
        taken = free_port()
        held.bind(("127.0.0.1", taken))
        other = free_port()
        draws = iter([taken, taken, other])
        monkeypatch.setattr(ports._DRAW, "randrange", lambda low, high: next(draws))
        assert free_port() == other  # the held port, drawn twice, passed over
