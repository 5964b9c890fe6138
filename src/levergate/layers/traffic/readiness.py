"""Readiness: can this gateway serve? The answer `/readyz` gives a load balancer.

Read, never probed: the verdict on each endpoint key is the one the balancer acts on
(`EndpointState.serving`: passive outlier ejection, and the active health checks when
`traffic.health_checks` is on). A model alias can serve when one of its endpoint keys, or one
of a fallback alias's, is serving. Without health checks an idle upstream that died is learned
of only from the requests that fail on it (`traffic.ejection.consecutive_failures` of them):
turn the checks on for readiness to follow the upstreams with no traffic.

`server.readiness` decides what readiness asks of the aliases:

    any_model     at least one alias can serve (the default): a replica whose models all fail
                  leaves the load balancer; one with some failing stays and says which (all
                  replicas usually share the upstreams, so taking every one out for one dead
                  model would stop the models that still work too)
    every_model   every alias can serve
    started       only started and not draining (the upstreams are someone else's concern)

Whatever the mode, a gateway not yet started or draining (`server.drain_seconds` after a
SIGTERM) is not ready.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from levergate.config import ModelSettings
from levergate.config.server import ReadinessMode
from levergate.layers.traffic.endpoints import EndpointState


@dataclass(frozen=True, slots=True)
class Readiness:
    ready: bool
    status: str  # "ok", "degraded" (ready, some aliases cannot serve), "starting", "draining",
    # "unavailable"
    unavailable: tuple[str, ...] = ()


def unavailable(
    models: Mapping[str, ModelSettings],
    endpoints: Mapping[str, Sequence[EndpointState]],
    *,
    now: float,
) -> tuple[str, ...]:
    """The aliases that can serve neither themselves nor through a fallback."""

    def serving(alias: str) -> bool:
        model = models.get(alias)
        return model is not None and any(
            state.serving(now) for t in model.endpoints for state in endpoints.get(t.upstream, ())
        )

    return tuple(
        name
        for name, model in models.items()
        if not serving(name) and not any(serving(f) for f in model.fallbacks)
    )


def judge(
    *,
    mode: ReadinessMode,
    started: bool,
    draining: bool,
    models: Mapping[str, ModelSettings],
    endpoints: Mapping[str, Sequence[EndpointState]],
    now: float,
) -> Readiness:
    if draining:
        return Readiness(ready=False, status="draining")
    if not started:
        return Readiness(ready=False, status="starting")
    if mode == "started":
        return Readiness(ready=True, status="ok")
    down = unavailable(models, endpoints, now=now)
    if not down:
        return Readiness(ready=True, status="ok")
    if mode == "every_model" or len(down) == len(models):
        return Readiness(ready=False, status="unavailable", unavailable=down)
    return Readiness(ready=True, status="degraded", unavailable=down)
