"""Adaptive concurrency by AIMD (Netflix concurrency-limits' `AIMDLimit`), for upstreams whose
real capacity is unknown: grow the limit by one on success while it is actually being used,
cut it multiplicatively on a drop (429, timeout, or a response slower than `slow_seconds`).

Additive increase probes for capacity gently; multiplicative decrease backs off fast enough
that many gateways sharing one upstream converge instead of oscillating. The value is a float
so repeated 0.9 cuts stay smooth; `limit` is what callers use.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(slots=True)
class Aimd:
    initial: float = 20.0
    minimum: float = 1.0
    maximum: float = 1000.0
    increase: float = 1.0
    decrease: float = 0.9
    _value: float = field(init=False)

    def __post_init__(self) -> None:
        if not (0 < self.minimum <= self.initial <= self.maximum) or not 0 < self.decrease < 1:
            raise ValueError("AIMD needs 0 < minimum <= initial <= maximum and 0 < decrease < 1")
        self._value = self.initial

    @property
    def limit(self) -> int:
        return max(1, math.floor(self._value))

    def success(self, *, in_flight: int) -> None:
        # Growing while half the permits sit idle would raise a limit nothing is testing.
        if in_flight * 2 >= self.limit:
            self._value = min(self.maximum, self._value + self.increase)

    def drop(self) -> None:
        self._value = max(self.minimum, self._value * self.decrease)
