"""Dispatch: the bottom of the per-request stack. It resolves the model alias the client named to
that model's own stack (whose Balance layer sends the call to an endpoint under that endpoint's
name for the model).
A `*` model catches every name not listed."""

from __future__ import annotations

from collections.abc import Mapping

from levergate.core.call import Call
from levergate.core.service import Answer, Service
from levergate.errors import ModelNotFound


class Dispatch:
    def __init__(self, routes: Mapping[str, Service], *, fallback: Service | None) -> None:
        self._routes = dict(routes)
        self._fallback = fallback

    def __call__(self, call: Call) -> Answer:
        model = call.model
        service = self._routes.get(model, self._fallback)
        if service is None:
            raise ModelNotFound(model)
        # The alias that answers, as the record shows it (a fallback's dispatch comes last).
        call.ctx.trace.alias = model
        return service(call)
