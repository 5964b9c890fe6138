"""The gateway-wide retry budget (after tower's `TpsBudget` and Envoy's retry budgets).

A fixed "3 retries per request" multiplies load by 4 exactly when the upstream is failing,
which is when it can least afford it. A budget instead lets retries be at most `ratio` of the
requests seen in the last `ttl` seconds, plus a small floor of `min_per_second` so a quiet
gateway can still retry. Every request deposits; every retry withdraws; when the budget is
spent, the error goes back to the caller (or to a fallback) instead of upstream again.

Deposits and withdrawals are kept in `slots` time buckets covering `ttl`, so old traffic ages
out without storing one entry per request. Time comes from the caller.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(slots=True)
class RetryBudget:
    ratio: float = 0.2
    min_per_second: float = 1.0
    ttl: float = 10.0
    slots: int = 10
    _deposits: list[float] = field(init=False)
    _withdrawals: list[float] = field(init=False)
    _slot: int = field(init=False, default=0)
    _slot_started: float = field(init=False, default=-math.inf)

    def __post_init__(self) -> None:
        if self.ratio < 0 or self.min_per_second < 0 or self.ttl <= 0 or self.slots < 1:
            raise ValueError("retry budget: ratio and floor >= 0, ttl > 0, slots >= 1")
        self._deposits = [0.0] * self.slots
        self._withdrawals = [0.0] * self.slots

    def _rotate(self, now: float) -> None:
        width = self.ttl / self.slots
        if self._slot_started == -math.inf:
            self._slot_started = now
            return
        steps = int((now - self._slot_started) // width)
        if steps <= 0:
            return
        for _ in range(min(steps, self.slots)):
            self._slot = (self._slot + 1) % self.slots
            self._deposits[self._slot] = 0.0
            self._withdrawals[self._slot] = 0.0
        self._slot_started += steps * width

    def deposit(self, *, now: float) -> None:
        """One request (not a retry) started."""
        self._rotate(now)
        self._deposits[self._slot] += 1.0

    def balance(self, *, now: float) -> float:
        """Retries still allowed right now."""
        self._rotate(now)
        allowed = self.min_per_second * self.ttl + self.ratio * sum(self._deposits)
        return allowed - sum(self._withdrawals)

    def withdraw(self, *, now: float) -> bool:
        """Spend one retry if the budget holds one; False means do not retry."""
        if self.balance(now=now) < 1.0:
            return False
        self._withdrawals[self._slot] += 1.0
        return True
