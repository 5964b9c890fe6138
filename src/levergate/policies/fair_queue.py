"""A fair queue of slots for expensive requests, per tenant: the edge's admission of large
request bodies (server/large.py) keeps its state here, pure and synchronous, so the invariants
can be property-tested (tests/properties/test_fair_queue.py) apart from the event loop.

- At most `total` requests hold a slot at once, and at most `per_tenant` of one tenant.
- Work-conserving: a slot is never left free while a tenant under its own cap waits, so a
  request that arrives to a free slot (and its tenant under its cap) runs at once.
- Fair: a freed slot goes to the waiting tenant with the fewest slots held (policies/
  fair_share.py, the batch runner's water-filling), ties to the one granted a slot least
  recently: a tenant with a thousand waiting requests and one with one alternate.
- Bounded: at most `waiting` requests of one tenant wait; one more is refused (`Full`), the
  caller's 429. A tenant's queue is FIFO.

Tickets are the caller's opaque values (futures at the edge): `arrive` queues one or says it
runs now, `leave` frees a slot and returns the tickets that now run, `withdraw` takes back one
that gave up waiting.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from levergate.policies.fair_share import shares

T = TypeVar("T", bound=Hashable)


class Full(Exception):
    """The tenant already has `waiting` requests waiting."""


@dataclass(slots=True)
class FairQueue(Generic[T]):
    total: int
    per_tenant: int
    waiting: int
    running: Counter[str] = field(default_factory=Counter)
    queues: dict[str, deque[T]] = field(default_factory=dict)  # tenants with waiters only
    # Tenants holding or waiting, least recently granted a slot first (ties go to the first).
    recency: dict[str, None] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.total < 1 or self.per_tenant < 1 or self.waiting < 0:
            raise ValueError("total and per_tenant must be at least 1, waiting at least 0")

    def held(self) -> int:
        return self.running.total()

    def arrive(self, tenant: str, ticket: T) -> bool:
        """True: `ticket` holds a slot now; False: it waits (its turn comes from `leave`).
        Raises `Full` when the tenant's queue is at its bound."""
        if self.held() < self.total and self.running[tenant] < self.per_tenant:
            self._take(tenant)
            return True
        queue = self.queues.setdefault(tenant, deque())
        if len(queue) >= self.waiting:
            if not queue:
                del self.queues[tenant]
            raise Full(tenant)
        queue.append(ticket)
        return False

    def leave(self, tenant: str) -> list[T]:
        """`tenant` gives a slot back; the tickets that take the free slots, in order."""
        if self.running[tenant] <= 0:
            raise ValueError(f"{tenant!r} holds no slot")
        self.running[tenant] -= 1
        if not self.running[tenant]:
            del self.running[tenant]
            if tenant not in self.queues:
                self.recency.pop(tenant, None)
        return self._grant()

    def withdraw(self, tenant: str, ticket: T) -> bool:
        """Take back a waiting ticket (its request gave up); False if it is not waiting."""
        queue = self.queues.get(tenant)
        if queue is None or ticket not in queue:
            return False
        queue.remove(ticket)
        if not queue:
            del self.queues[tenant]
            if not self.running[tenant]:
                self.recency.pop(tenant, None)
        return True

    def _take(self, tenant: str) -> None:
        self.running[tenant] += 1
        self.recency.pop(tenant, None)
        self.recency[tenant] = None

    def _grant(self) -> list[T]:
        """Free slots to waiting tenants one at a time (each grant changes who holds fewest)."""
        started: list[T] = []
        while self.queues and self.held() < self.total:
            never = [t for t in self.queues if t not in self.recency]
            order = never + [t for t in self.recency if t in self.queues]
            given = shares(free=1, waiting=order, inflight=self.running, cap=self.per_tenant)
            if not given:
                break  # every waiting tenant is at its own cap
            (tenant,) = given
            queue = self.queues[tenant]
            started.append(queue.popleft())
            self._take(tenant)
            if not queue:
                del self.queues[tenant]
        return started
