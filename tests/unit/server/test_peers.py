"""Which silent connection goes when a new one arrives at the cap: one over its peer's limit
first, else the oldest silent long enough; never one that has spoken, nor the newcomer."""

from __future__ import annotations

from levergate.server.peers import Peers


class Conn:
    def __init__(self, name: str) -> None:
        self.name = name
        self.closed = False

    def shed(self) -> None:
        self.closed = True


def test_a_peer_over_its_limit_is_flagged_and_counted_down_on_close() -> None:
    peers = Peers(per_peer=2, shed_after=1.0)
    a, b, c = Conn("a"), Conn("b"), Conn("c")
    assert not peers.opened(a, peer="10.0.0.1", now=0)
    assert not peers.opened(b, peer="10.0.0.1", now=0)
    assert peers.opened(c, peer="10.0.0.1", now=0)
    assert not peers.opened(Conn("d"), peer="10.0.0.2", now=0)
    peers.closed(a, peer="10.0.0.1")
    assert not peers.over("10.0.0.1")
    peers.closed(b, peer="10.0.0.1")
    peers.closed(c, peer="10.0.0.1")
    assert "10.0.0.1" not in peers.open


def test_no_per_peer_limit_when_it_is_zero() -> None:
    peers = Peers(per_peer=0, shed_after=1.0)
    assert not any(peers.opened(Conn(str(i)), peer="p", now=0) for i in range(100))


def test_the_one_over_its_peers_limit_is_shed_first_whatever_its_age() -> None:
    peers = Peers(per_peer=1, shed_after=5.0)
    old, mine, over = Conn("old"), Conn("mine"), Conn("over")
    peers.opened(old, peer="a", now=0)
    peers.opened(mine, peer="b", now=9)
    peers.opened(over, peer="b", now=9.5)
    newcomer = Conn("new")
    peers.opened(newcomer, peer="c", now=10)
    assert peers.shed(now=10, keep=newcomer)
    assert (over.closed, old.closed, mine.closed) == (True, False, False)


def test_else_the_oldest_silent_one_old_enough_but_never_one_that_spoke() -> None:
    peers = Peers(per_peer=0, shed_after=5.0)
    spoke, silent, young = Conn("spoke"), Conn("silent"), Conn("young")
    peers.opened(spoke, peer="a", now=0)
    peers.opened(silent, peer="a", now=1)
    peers.opened(young, peer="a", now=8)
    peers.spoke(spoke)
    newcomer = Conn("new")
    peers.opened(newcomer, peer="a", now=10)
    assert peers.shed(now=10, keep=newcomer)
    assert (spoke.closed, silent.closed, young.closed) == (False, True, False)
    assert not peers.shed(now=10, keep=newcomer)  # only young ones and the newcomer are left
    assert not newcomer.closed
