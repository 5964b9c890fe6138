"""What the per-endpoint levers know about one endpoint key, shared between them.

An `EndpointState` exists once per (upstream, API key) pair, however many model aliases route
to it: its health (outlier ejection), its waiting room (limits), and the load the balancer
scores it by (requests and tokens outstanding, TTFT and speed averages, the provider's quota
headroom, a cooldown after a 429). `EjectionGroup` holds them all, to cap how many may be
ejected at once. `Node` pairs a state with the service stack that reaches the endpoint.
`EndpointGauges` shows each state's load as gauges, read only when the registry is collected.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from levergate.core.service import Service
from levergate.layers.traffic.metrics import TrafficMetrics
from levergate.layers.traffic.waiting import WaitingRoom
from levergate.policies.ejection import EJECTED, HEALTHY, Ejection
from levergate.policies.ewma import Ewma

_log = logging.getLogger(__name__)


@dataclass(eq=False)
class EndpointState:
    name: str
    room: WaitingRoom
    health: Ejection = field(default_factory=Ejection)
    ttft: Ewma = field(default_factory=Ewma)  # upstream seconds to the first event of a stream
    latency: Ewma = field(default_factory=Ewma)  # upstream seconds to the reply (head or whole)
    speed: Ewma = field(default_factory=Ewma)  # output tokens per second of one request
    outstanding: int = 0
    prefilling: int = 0  # of which not answered yet (no first token, no whole answer)
    queued_tokens: float = 0.0
    headroom: float = 1.0  # share of the provider's quota left, from x-ratelimit-* headers
    cooldown_until: float = 0.0  # no new request before this (after a 429 or an empty quota)
    # The active health checks' verdict (layers/traffic/health_checks.py): down even where the
    # ejection cap kept the endpoint serving (fail open), which readiness must not take as up.
    probed_down: bool = False

    def serving(self, now: float) -> bool:
        """Whether the endpoint is believed able to answer: not ejected (half-open counts: it
        lets a request through) and not failing its health checks."""
        return not self.probed_down and self.health.state(now) is not EJECTED


@dataclass(eq=False)
class Node:
    state: EndpointState
    service: Service


class EjectionGroup:
    """Every endpoint's health, so ejections can be capped and counted in one place."""

    def __init__(self, *, max_share: float, metrics: TrafficMetrics) -> None:
        self._max_share = max_share
        self._metrics = metrics
        self._members: list[EndpointState] = []
        self._marked: set[str] = set()  # ejected and not yet back to healthy

    def add(self, state: EndpointState) -> None:
        self._members.append(state)

    def may_eject(self, now: float) -> bool:
        ejected = sum(1 for m in self._members if m.health.state(now) is EJECTED)
        return ejected < max(1, math.floor(self._max_share * len(self._members)))

    def failure(self, state: EndpointState, now: float) -> None:
        before = state.health.state(now)
        after = state.health.failure(now, may_eject=self.may_eject(now))
        if after is EJECTED and before is not EJECTED:
            self._ejected(state)

    def success(self, state: EndpointState, now: float) -> None:
        if state.health.success(now) is HEALTHY and state.name in self._marked:
            self._marked.discard(state.name)
            self._metrics.ejected.labels(state.name).set(0)
            _log.warning("endpoint %s is healthy again", state.name)

    def eject(self, state: EndpointState, now: float) -> None:
        """Eject a latency outlier or an endpoint failing its health checks (the cap applies)."""
        if state.health.state(now) is HEALTHY and self.may_eject(now):
            state.health.eject(now)
            self._ejected(state)

    def keep_out(self, state: EndpointState, now: float, *, until: float) -> None:
        """An active check finds `state` down: eject it if it serves, else hold it out until
        `until` (past the next check), so no half-open request is spent on it meanwhile."""
        if state.health.state(now) is HEALTHY:
            self.eject(state, now)
        else:
            state.health.hold(until)

    def readmit(self, state: EndpointState, now: float) -> None:
        """An active check finds `state` up again: serve at once, no half-open probe needed."""
        if state.health.state(now) is not HEALTHY:
            self.success(state, now)

    def _ejected(self, state: EndpointState) -> None:
        self._marked.add(state.name)
        self._metrics.ejections.labels(state.name).inc()
        self._metrics.ejected.labels(state.name).set(1)
        _log.warning(
            "endpoint %s ejected (ejection %d, until %.1fs)",
            state.name,
            state.health.ejections,
            state.health.ejected_until,
        )


class EndpointGauges(Collector):
    """Each endpoint key's load when the registry is collected (a scrape, the dashboard), so a
    request pays nothing for them: requests in flight, requests waiting in its waiting room
    (queue depth), the provider's quota left (`x-ratelimit-*`), and whether it serves.
    `/metrics` collects from a worker thread: these are plain reads of numbers the event loop
    writes (no state is changed here, unlike `Ejection.state`), so a scrape sees each value as
    it was at some instant."""

    def __init__(self, group: EjectionGroup, *, now: Callable[[], float]) -> None:
        self._group = group
        self._now = now

    def describe(self) -> Iterator[GaugeMetricFamily]:
        return iter(self._families())

    def collect(self) -> Iterator[GaugeMetricFamily]:
        families = self._families()
        outstanding, queued, headroom, up = families
        now = self._now()
        for state in tuple(self._group._members):
            name = [state.name]
            outstanding.add_metric(name, state.outstanding)
            queued.add_metric(name, state.room.queued)
            headroom.add_metric(name, state.headroom)
            ejected = state.health.ejected_until > now
            up.add_metric(name, 0.0 if ejected or state.probed_down else 1.0)
        return iter(families)

    @staticmethod
    def _families() -> list[GaugeMetricFamily]:
        label = ["endpoint"]
        return [
            GaugeMetricFamily("levergate_endpoint_outstanding",
                              "Requests in flight to an endpoint key.", labels=label),
            GaugeMetricFamily("levergate_endpoint_queued",
                              "Requests waiting for an endpoint key's limits (queue depth).",
                              labels=label),
            GaugeMetricFamily("levergate_endpoint_quota_headroom_ratio",
                              "Share of the provider's quota left, from its x-ratelimit-* "
                              "headers (1 until it sends some).", labels=label),
            GaugeMetricFamily("levergate_endpoint_up",
                              "1 while an endpoint key serves, 0 while ejected or failing its "
                              "health checks.", labels=label),
        ]  # fmt: skip
