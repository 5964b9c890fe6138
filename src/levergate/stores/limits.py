"""The limiter-store seam: where the GCRA state of every rate limit lives.

Two methods. `acquire` checks a set of charges (a request's RPM and TPM against its key, its
endpoint and its tenant) and commits all of them or none — a request refused by one limit must
not have spent another. `adjust` corrects a committed charge once the real cost is known.

Implementations: `MemoryLimitStore` (one process, the embedded default), `RedisLimitStore`
(every replica shares one limit through an atomic Lua script) and `FailoverLimitStore`
(Redis, falling back to per-process limits while Redis is unreachable).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from levergate.core.clock import Clock
from levergate.policies import gcra
from levergate.policies.gcra import Rate

_PRUNE_ABOVE = 10_000  # keys kept before idle ones are dropped (tenants can be many)


@dataclass(frozen=True, slots=True)
class Charge:
    """`cost` units against the limit `rate` kept under `key`."""

    key: str
    cost: float
    rate: Rate


class StoreUnavailable(Exception):
    """The shared store could not answer; callers fall back, never fail the request."""


class LimitStore(Protocol):
    async def acquire(self, charges: Sequence[Charge], *, commit: bool = True) -> float:
        """0.0 when every charge fits (and, with `commit`, is spent); otherwise the seconds
        until all of them would fit, with nothing spent."""
        ...

    async def adjust(self, charges: Sequence[Charge]) -> None:
        """Spend `cost` more (or refund a negative `cost`) without checking the limit."""
        ...


class MemoryLimitStore:
    """GCRA state in a dict: exact within one process, invisible to the others."""

    def __init__(self, *, clock: Clock) -> None:
        self._clock = clock
        self._tats: dict[str, float] = {}

    async def acquire(self, charges: Sequence[Charge], *, commit: bool = True) -> float:
        return self.acquire_now(charges, commit=commit)

    def acquire_now(self, charges: Sequence[Charge], *, commit: bool = True) -> float:
        """The synchronous core, also used by the failover store without an await."""
        now = self._clock.now()
        steps = [
            gcra.check(tat=self._tats.get(c.key), now=now, cost=c.cost, rate=c.rate)
            for c in charges
        ]
        wait = max((s.wait for s in steps), default=0.0)
        if wait > 0:
            return wait
        if commit:
            if len(self._tats) > _PRUNE_ABOVE:
                self._prune(now)
            for charge, step in zip(charges, steps, strict=True):
                self._tats[charge.key] = step.tat
        return 0.0

    async def adjust(self, charges: Sequence[Charge]) -> None:
        now = self._clock.now()
        for charge in charges:
            tat = gcra.adjusted(
                tat=self._tats.get(charge.key), now=now, delta=charge.cost, rate=charge.rate
            )
            if tat is None:
                self._tats.pop(charge.key, None)
            else:
                self._tats[charge.key] = tat

    def _prune(self, now: float) -> None:
        for key in [k for k, tat in self._tats.items() if tat <= now]:
            del self._tats[key]
