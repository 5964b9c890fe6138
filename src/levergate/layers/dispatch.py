"""Dispatch: the bottom of the per-request stack. It resolves the model alias the client named to
that model's own stack (which rewrites the name to the upstream's and goes on to its endpoint).
A `*` model catches every name not listed."""

from __future__ import annotations

from collections.abc import Mapping

from levergate.core.call import Call
from levergate.core.reply import Reply
from levergate.core.service import Service
from levergate.errors import ModelNotFound


class Dispatch:
    def __init__(self, routes: Mapping[str, Service], *, fallback: Service | None) -> None:
        self._routes = dict(routes)
        self._fallback = fallback

    async def __call__(self, call: Call) -> Reply:
        service = self._routes.get(call.model, self._fallback)
        if service is None:
            raise ModelNotFound(call.model)
        return await service(call)


class RenameModel:
    """Sends the call upstream under the upstream's name for the model."""

    def __init__(self, inner: Service, *, upstream_model: str) -> None:
        self._inner = inner
        self._name = upstream_model

    async def __call__(self, call: Call) -> Reply:
        return await self._inner(call.with_body(model=self._name))
