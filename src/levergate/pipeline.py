"""`build_pipeline`: the ONE place where the order of the layers is written, with the reason for
each position. Reordering the levers is a one-line diff here and nowhere else.

    FRONT, per request:   Measure → Authenticate → Dispatch(model alias)
    PER MODEL:            RenameModel
    PER ENDPOINT:         OpenAIUpstream (HTTP pool)

Later levers slot in where DESIGN.md puts them (admission and caches in FRONT; prompt-cache
optimizer, trim, retry, deadline and balance per model; outlier ejection and limits per endpoint).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from levergate.config import WILDCARD, Model, Settings, Upstream
from levergate.core.clock import Clock, SystemClock
from levergate.core.service import Layer, Service, stack
from levergate.layers.auth import Authenticate
from levergate.layers.dispatch import Dispatch, RenameModel
from levergate.layers.metrics import Measure, Telemetry
from levergate.upstreams import Endpoint, make_endpoint
from levergate.upstreams.client import HttpClient, client_for


@dataclass(frozen=True)
class Deps:
    """What the pipeline needs from the outside world; tests pass their own."""

    clock: Clock = field(default_factory=SystemClock)
    http_client: Callable[[Upstream], HttpClient] = client_for


@dataclass
class Pipeline:
    service: Service
    telemetry: Telemetry
    upstreams: dict[str, Endpoint]
    models: dict[str, Model]

    async def aclose(self) -> None:
        for upstream in self.upstreams.values():
            await upstream.aclose()


def build_pipeline(settings: Settings, deps: Deps | None = None) -> Pipeline:
    deps = deps or Deps()
    telemetry = Telemetry(settings.metrics)
    upstreams = {u.name: make_endpoint(u, http_client=deps.http_client) for u in settings.upstreams}

    def per_model(model: Model) -> Service:
        layers: list[Layer] = []
        if model.upstream_model and model.name != WILDCARD:
            layers.append(partial(RenameModel, upstream_model=model.upstream_model))
        return stack(upstreams[model.upstream], layers)

    models = {m.name: m for m in settings.models}
    routes = {name: per_model(m) for name, m in models.items() if name != WILDCARD}
    fallback = per_model(models[WILDCARD]) if WILDCARD in models else None

    front: list[Layer] = []
    if settings.metrics.enabled:
        prices = {name: m.price for name, m in models.items()}
        # Outermost: it must see every request, including the ones refused further down.
        front.append(partial(Measure, telemetry=telemetry, prices=prices))
    # Decides the tenant before anything keyed or limited by tenant.
    front.append(partial(Authenticate, settings=settings.auth))

    service = stack(Dispatch(routes, fallback=fallback), front)
    return Pipeline(service=service, telemetry=telemetry, upstreams=upstreams, models=models)
