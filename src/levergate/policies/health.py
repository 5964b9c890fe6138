"""The verdict of an endpoint's active health checks: hysteresis over consecutive probes.

    up --(unhealthy_threshold failed probes in a row)--> down
    down --(healthy_threshold passed probes in a row)--> up

Envoy's thresholds: one lost probe (a dropped packet, a GC pause) neither takes an endpoint out
nor, once out, does one lucky probe bring a flapping one back. Every endpoint starts up, since
it serves before its first probe has answered.

A pure value: `after` returns the next verdict, so a property test can replay any sequence of
probe outcomes against a reference scan. `layers.traffic.health_checks` acts on the flips.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CheckPolicy:
    unhealthy_threshold: int = 2
    healthy_threshold: int = 2

    def __post_init__(self) -> None:
        if self.unhealthy_threshold < 1 or self.healthy_threshold < 1:
            raise ValueError("thresholds must be at least 1")


@dataclass(frozen=True, slots=True)
class Verdict:
    down: bool = False
    # Consecutive probes that disagree with the verdict so far (they count towards a flip).
    streak: int = 0

    def after(self, *, passed: bool, policy: CheckPolicy) -> Verdict:
        """The verdict once one more probe has `passed` (or not)."""
        agrees = passed != self.down
        if agrees:
            return dataclasses.replace(self, streak=0) if self.streak else self
        streak = self.streak + 1
        needed = policy.healthy_threshold if self.down else policy.unhealthy_threshold
        if streak >= needed:
            return Verdict(down=not self.down)
        return Verdict(down=self.down, streak=streak)
