"""Who holds a server's connections: the count per peer address, and the connections that have
not sent a byte yet, shared by one server's connections (server/http_protocol.py).

Why: the connection cap (`server.max_connections`) is the gateway's, not a client's. One
client re-opening 4,300 idle sockets held the whole cap, and a normal client got 1 answer in
20 (the rest a 503). Two rules keep the cap for clients that use it:

- Per peer: a connection from an address that already has `server.max_connections_per_peer`
  open is answered 503 (`too_many_connections_from_peer`) once its head arrives, and is the
  first to be shed while it has sent nothing. (Closing it at once instead made the peer
  re-open in a tight loop that took the CPU: 3 normal requests in 20 s instead of 147.)
- Shedding: a connection over the cap that sends its first bytes closes one that has never
  sent a byte — first one over its peer's limit, else the oldest silent for at least
  `server.shed_idle_after_seconds` — and takes its place. A silent connection has no request
  to lose: closing it is what the head timeout would do anyway, only sooner. Only a client at
  work sheds: silent newcomers shedding each other would only churn (measured: a peer
  re-opening 600 sockets against a cap of 500 then held it with ever-young sockets).

The peer is the TCP peer's address. Behind a load balancer or a reverse proxy every client
is the balancer's address: set `max_connections_per_peer: 0` (off), or above the balancer's
connection pool, and limit per client at the balancer (the gateway cannot read a forwarded
address before a request head, and a head is what an idle connection never sends).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Protocol


class Connection(Protocol):
    def shed(self) -> None:
        """Close this connection, which has sent nothing."""


@dataclass(slots=True)
class Peers:
    per_peer: int  # 0: no per-peer limit
    shed_after: float
    open: Counter[str] = field(default_factory=Counter)
    # Connections that have not sent a byte, oldest first, with the time each was opened; the
    # ones over their peer's limit again on their own.
    silent: dict[Connection, float] = field(default_factory=dict)
    silent_over: dict[Connection, None] = field(default_factory=dict)

    def opened(self, conn: Connection, *, peer: str, now: float) -> bool:
        """Count `conn` in; True when its peer is now over its limit."""
        self.open[peer] += 1
        self.silent[conn] = now
        over = self.over(peer)
        if over:
            self.silent_over[conn] = None
        return over

    def over(self, peer: str) -> bool:
        return 0 < self.per_peer < self.open[peer]

    def spoke(self, conn: Connection) -> None:
        """`conn` sent its first bytes: it is a client at work, never shed."""
        if self.silent.pop(conn, None) is not None:
            self.silent_over.pop(conn, None)

    def closed(self, conn: Connection, *, peer: str) -> None:
        self.spoke(conn)
        left = self.open[peer] - 1
        if left > 0:
            self.open[peer] = left
        else:
            del self.open[peer]

    def shed(self, *, now: float, keep: Connection) -> bool:
        """Close one silent connection other than `keep`; False when none may be closed."""
        victim = next((c for c in self.silent_over if c is not keep), None)
        if victim is None:
            for conn, since in self.silent.items():
                if now - since < self.shed_after:
                    break  # the rest are younger still
                if conn is not keep:
                    victim = conn
                    break
        if victim is None:
            return False
        self.spoke(victim)
        victim.shed()
        return True
