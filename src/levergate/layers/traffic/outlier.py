"""OutlierEjection: passive health of one endpoint key, learned from real traffic.

PER ENDPOINT, the outermost layer there, so it sees every outcome of the endpoint (limits
below it only delay). Only the endpoint's own failures count — refused or cut connections,
5xx, timeouts, a stream broken by the provider, a key the provider refuses (401/403). Any
other 4xx is an answer (the endpoint is alive); the gateway's own refusals or a client
leaving say nothing about the endpoint.

The balancer reads the verdict (`EndpointState.health`) to stop choosing an ejected endpoint;
after the ejection time one request goes through as a probe, and its outcome readmits the
endpoint or ejects it again for longer. See `policies.ejection` for the state machine.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from levergate.core.call import Call
from levergate.core.clock import Clock
from levergate.core.reply import Completed, Ended, Reply, Watcher
from levergate.core.service import Layer, Service
from levergate.errors import UpstreamRejected, UpstreamTimeout, UpstreamUnavailable
from levergate.layers.measure import hot
from levergate.layers.traffic.endpoints import EjectionGroup, EndpointState
from levergate.layers.traffic.metrics import TrafficMetrics

if TYPE_CHECKING:
    from levergate.layers.shared import Shared
    from levergate.layers.traffic.keys import EndpointKey


class OutlierEjection(Watcher):
    """Its own stream watcher: a stream's outcome is settled when it ends (no per-request state)."""

    @classmethod
    def layer(cls, key: EndpointKey, *, shared: Shared) -> Layer:
        t = shared.traffic
        return partial(cls, state=key.state, group=t.group, clock=shared.clock, metrics=t.metrics)

    def __init__(
        self,
        inner: Service,
        *,
        state: EndpointState,
        group: EjectionGroup,
        clock: Clock,
        metrics: TrafficMetrics,
    ) -> None:
        self._inner = inner
        self._state = state
        self._group = group
        self._clock = clock
        self._outcomes = {
            outcome: hot.counter(metrics.attempts.labels(state.name, outcome))
            for outcome in ("ok", "rejected", "failed")
        }

    async def __call__(self, call: Call) -> Reply:
        self._state.health.begin(self._clock.now())
        try:
            reply = await self._inner(call)
        except BaseException as exc:
            self._settle(exc)
            raise
        if isinstance(reply, Completed):
            self._settle(None)
            return reply
        return reply.watch(self)

    async def end(self, ended: Ended) -> None:
        self._settle(ended.error)

    def _settle(self, exc: BaseException | None) -> None:
        now = self._clock.now()
        if exc is None or (isinstance(exc, UpstreamRejected) and not _key_refused(exc)):
            self._outcomes["ok" if exc is None else "rejected"].inc()
            self._group.success(self._state, now)
        elif isinstance(exc, UpstreamUnavailable | UpstreamTimeout | UpstreamRejected):
            self._outcomes["failed"].inc()
            self._group.failure(self._state, now)
        else:
            # Refused by our own limits, cancelled, or the client left: no verdict.
            self._state.health.release_probe()


def _key_refused(exc: UpstreamRejected) -> bool:
    """401/403: this endpoint's key is revoked or lacks access — its fault, not the caller's."""
    return exc.upstream_status in {401, 403}
