"""Time-decayed exponentially weighted moving averages, the balancer's memory of each endpoint.

Decay is by elapsed time (`tau` seconds), not by sample count: an endpoint that was slow a
minute ago and has not been tried since should not still look slow because nobody sampled it,
and a busy endpoint should not forget faster than a quiet one. Until the first sample the
value is `initial` (optimistic by default, so new endpoints get tried).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(slots=True)
class Ewma:
    tau: float = 10.0
    initial: float = 0.0
    _value: float = field(init=False)
    _at: float | None = field(init=False, default=None)
    _weight: float = field(init=False, default=0.0)

    def __post_init__(self) -> None:
        if self.tau <= 0:
            raise ValueError("tau must be positive")
        self._value = self.initial

    @property
    def sampled(self) -> bool:
        return self._at is not None

    def observe(self, sample: float, *, now: float) -> None:
        if self._at is None:
            self._value = sample
            self._weight = 1.0
        else:
            keep = math.exp(-max(0.0, now - self._at) / self.tau)
            self._value = keep * self._value + (1.0 - keep) * sample
            self._weight = keep * self._weight + 1.0
        self._at = now

    def weight(self, now: float) -> float:
        """How many samples the value rests on, each decaying like its share of the average:
        about the samples of the last `tau` seconds. After a quiet spell the value is mostly
        the latest sample, and this says so."""
        if self._at is None:
            return 0.0
        return self._weight * math.exp(-max(0.0, now - self._at) / self.tau)

    def value(self) -> float:
        return self._value
