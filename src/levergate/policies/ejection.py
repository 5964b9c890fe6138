"""Passive outlier ejection for one endpoint (Envoy's outlier detection, reduced to its core).

    healthy --(N consecutive failures)--> ejected --(ejection time over)--> half-open
       ^                                     ^                                  |
       +----------(probe succeeds)-----------+-------(probe fails)--------------+

The ejection time grows with each ejection (`base * ejections`, capped), so a flapping endpoint
is tried less and less often; after `forgive_after` seconds healthy the count starts again.
Half-open lets exactly one request through as a probe; its outcome decides. Active health
checks (`layers.traffic.health_checks`) drive the same machine: they eject, `hold` an endpoint out
while their probes fail, and readmit it (`success`) when they pass again. A group cap
(`may_eject`, decided by the caller) keeps at least one endpoint serving.

A state machine with the time passed in, so tests drive it with a manual clock and see every
transition.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class State(enum.Enum):
    HEALTHY = "healthy"
    EJECTED = "ejected"
    HALF_OPEN = "half_open"


# The members, read once: a member read from its class costs ~900 instructions on CPython 3.11
# (callgrind), and an endpoint's state is asked several times a request (issue 22).
HEALTHY, EJECTED, HALF_OPEN = State.HEALTHY, State.EJECTED, State.HALF_OPEN


@dataclass(frozen=True, slots=True)
class EjectionPolicy:
    consecutive_failures: int = 5
    base_seconds: float = 30.0
    max_seconds: float = 300.0
    forgive_after: float = 300.0


@dataclass(slots=True)
class Ejection:
    policy: EjectionPolicy = field(default_factory=EjectionPolicy)
    failures: int = 0
    ejections: int = 0
    ejected_until: float = 0.0
    healthy_since: float = 0.0
    probing: bool = False
    _state: State = State.HEALTHY

    def state(self, now: float) -> State:
        if self._state is EJECTED and now >= self.ejected_until:
            self._state = HALF_OPEN
        return self._state

    def available(self, now: float) -> bool:
        """May a request be sent now? Half-open admits one probe at a time."""
        state = self.state(now)
        return state is HEALTHY or (state is HALF_OPEN and not self.probing)

    def begin(self, now: float) -> None:
        """A request was sent; in half-open it is the probe."""
        if self.state(now) is HALF_OPEN:
            self.probing = True

    def success(self, now: float) -> State:
        if self.state(now) is not HEALTHY:
            self._state = HEALTHY
            self.healthy_since = now
        self.probing = False
        self.failures = 0
        if self.ejections and now - self.healthy_since >= self.policy.forgive_after:
            self.ejections = 0
        return self._state

    def failure(self, now: float, *, may_eject: bool = True) -> State:
        """Record a failure; ejects when the threshold is reached (or a probe failed)."""
        state = self.state(now)
        self.failures += 1
        was_probe = state is HALF_OPEN
        self.probing = False
        if state is EJECTED:
            return state
        if was_probe or (self.failures >= self.policy.consecutive_failures and may_eject):
            self._eject(now)
        return self._state

    def release_probe(self) -> None:
        """The probe ended without a verdict (client left): let another one through."""
        self.probing = False

    def eject(self, now: float) -> None:
        """Eject now, whatever the failure count (a latency outlier, an active check)."""
        self._eject(now)

    def hold(self, until: float) -> None:
        """Stay ejected until at least `until`, without counting another ejection: an active
        check still finds the endpoint down, so a live request as the half-open probe would
        only fail. A healthy endpoint is left alone (ejecting it is `eject`'s job)."""
        if self._state is HEALTHY:
            return
        self._state = EJECTED
        self.ejected_until = max(self.ejected_until, until)

    def _eject(self, now: float) -> None:
        self.ejections += 1
        seconds = min(self.policy.max_seconds, self.policy.base_seconds * self.ejections)
        self.ejected_until = now + seconds
        self._state = EJECTED
        self.failures = 0
