"""The edge, independent of any HTTP framework: (method, path, headers, body source) in, a
`Response` out. The server's cycle (server.http_cycle), the ASGI app and the in-process httpx
transport are thin adapters over `Edge.handle`, so the proxy and the library share every
behaviour, errors included.

`handle` matches the route (`server.routes`: 404 for an unknown path, 405 with `allow` for a
wrong method), runs its guard, hands the body over the way the route wants it (whole under the
route's limit, or as chunks for a streaming route; 413 beyond the limit) and runs the handler
(`server.handlers`). Every error it answers carries `x-request-id`: the client's own when it is
safe to echo (`gateway.request_id_for`), else a fresh one, the same id the call and its logs use.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

import orjson

from levergate.core.call import Trace
from levergate.core.tokenizer import Tokenizer
from levergate.errors import LevergateError, error_payload
from levergate.gateway import REQUEST_ID_HEADER, Gateway
from levergate.principal import identify
from levergate.protocol.tokens import TiktokenCounter
from levergate.server.exchange import (
    BodySource,
    BytesBody,
    Request,
    Response,
    declared_length,
)
from levergate.server.guards import Credentials, client_key
from levergate.server.large import LargeRequests
from levergate.server.route import Divert, ErrorShape, Route, Routed
from levergate.server.routes import ROUTES, Router

if TYPE_CHECKING:
    from levergate.server.reload import Reloader

log = logging.getLogger("levergate.edge")

JSON = "application/json"
# The routes whose caller is a client (a tenant's key): those a large body waits a slot for.
# The admin API and /metrics have credentials of their own, and no tenant.
_CLIENT_GUARDS = (None, client_key)

__all__ = ["Edge", "Response", "error_response"]


class Edge:
    def __init__(self, gateway: Gateway, *, routes: tuple[Route, ...] = ROUTES) -> None:
        self.gateway = gateway
        self.credentials = Credentials(gateway)
        # Counts prompts for `/v1/messages/count_tokens` (encodings load on first use).
        self.tokenizer: Tokenizer = TiktokenCounter()
        settings = gateway.settings
        # A whole answer larger than this goes out in chunks of it (server/handlers/openai.py).
        self.chunk_bytes = settings.server.file_chunk_bytes
        # The features' routes after the core's (levergate/extension.py), and what they take
        # over of the model-call routes (async requests).
        extensions = [e for e in gateway.extensions if isinstance(e, Routed)]
        added = tuple(route for extension in extensions for route in extension.routes())
        self.diverts: tuple[Divert, ...] = tuple(
            divert for extension in extensions for divert in extension.diverts()
        )
        served = tuple(r for r in (*routes, *added) if r.enabled is None or r.enabled(settings))
        # The app's reloader (`POST /admin/reload`), when it was started from a file.
        self.reloader: Reloader | None = None
        self._router = Router(served, settings=settings.server)
        # Slots for large JSON bodies, fair across tenants (server/large.py).
        large = settings.server.large_requests
        self.large = LargeRequests(large) if large.enabled else None

    async def handle(
        self,
        method: str,
        path: str,
        headers: Mapping[str, str],
        body: BodySource | bytes,
        *,
        trace: Trace,
        query: str = "",
    ) -> Response:
        """Answer one request. `body` is the adapter's source of the body's bytes (or the whole
        body already in memory); headers are lower-cased; `query` is the raw query string."""
        request = Request(method, path, headers, trace)
        if query:
            request.query = query
        shape: ErrorShape = error_response
        id_header: str | None = None
        try:
            bound, request.params = self._router.match(method, path)
            route = bound.route
            if route.errors is not None:
                shape = route.errors
            id_header = route.id_header
            # `_routed` and `_whole`, inline for a route without a guard or a streamed body
            # (the model calls): two coroutines fewer a request, ~1k instructions each.
            if route.guard is not None or route.stream:
                return await self._routed(route, bound.limit, request, body)
            limit = bound.limit
            source = BytesBody(body) if isinstance(body, bytes) else body
            if self.large and self.large.is_large(headers):
                declared_length(headers, limit=limit)  # a 413 waits for no slot
                async with self.large.slot(await self._tenant(request)):
                    return await self._whole(route, request, source, limit=limit)
            arrived = getattr(source, "arrived", None)
            part = arrived(limit=limit) if arrived is not None else None
            request.body = part if part is not None else await source.read(limit=limit)
            with self.gateway.interactive:
                return await route.handler(self, request)
        except LevergateError as exc:
            response = shape(exc)
            response.headers.append((REQUEST_ID_HEADER, request.request_id))
            if id_header is not None:
                response.headers.append((id_header, request.request_id))
            return response

    async def _routed(self, route: Route, limit: int, request: Request,
                      body: BodySource | bytes) -> Response:  # fmt: skip
        """Guard, body and handler."""
        headers = request.headers
        if route.guard is not None:
            await route.guard(self, request)
        source = BytesBody(body) if isinstance(body, bytes) else body
        if route.stream:
            declared_length(headers, limit=limit)
            request.chunks = source.chunks(limit=limit)
            return await route.handler(self, request)
        if route.guard in _CLIENT_GUARDS and self.large and self.large.is_large(headers):
            declared_length(headers, limit=limit)  # a 413 waits for no slot
            async with self.large.slot(await self._tenant(request)):
                return await self._whole(route, request, source, limit=limit)
        return await self._whole(route, request, source, limit=limit)

    async def _whole(self, route: Route, request: Request, source: BodySource, *,
                     limit: int) -> Response:  # fmt: skip
        """Read the body, then answer: a client's model call counts as interactive while it is
        answered (the batch runner yields to it: core/interactive.py), not while its body is
        still arriving, so a client that stalls its upload holds no tenant's batches back. An
        upload (a streamed body) never counts: it is a batch's input, not a call waiting."""
        # A body already all there (`Cycle.arrived`: the usual small request) without a wait.
        arrived = getattr(source, "arrived", None)
        body = arrived(limit=limit) if arrived is not None else None
        request.body = body if body is not None else await source.read(limit=limit)
        if route.guard not in _CLIENT_GUARDS:
            return await route.handler(self, request)
        with self.gateway.interactive:
            return await route.handler(self, request)

    async def _tenant(self, request: Request) -> str:
        """Whose slots a large request waits for: the caller its route's guard identified, or
        as `Authenticate` will (a 401 now for a key that is none, before its body is read)."""
        if request.principal is None:
            credentials = self.credentials
            found = await identify(request.headers, keyring=credentials.keyring,
                                   auth_on=credentials.auth_on)  # fmt: skip
            return found.principal.tenant
        return request.principal.tenant


def error_response(exc: LevergateError) -> Response:
    status, payload, extra = error_payload(exc)
    if status >= 500:
        log.warning("%s: %s", type(exc).__name__, exc.message)
    return Response(status, [("content-type", JSON), *extra.items()], orjson.dumps(payload))
