"""`Httpx2Transport`: the in-process transport (`server/transport.py`) for clients built on
`httpx2`, the fork of httpx the official `anthropic` SDK (2.x) requires of an `http_client`:

    client = anthropic.AsyncAnthropic(api_key="-", base_url="http://levergate",
                                      http_client=httpx2.AsyncClient(transport=gw.httpx2_transport()))

It hands each request to the same `GatewayTransport` (one edge, one pipeline, the same
behaviour as the proxy) and moves the request and the response across the two libraries'
types: the body is read whole (the edge still holds it to the route's limit), a response stream
stays a stream frame by frame, closing it closes the upstream, and the client's read timeout
arrives as `httpx2.ReadTimeout`, which the SDK reports as `APITimeoutError`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import httpx
import httpx2

from levergate.server.transport import GatewayTransport

if TYPE_CHECKING:
    from levergate.gateway import Gateway


class Httpx2Transport(httpx2.AsyncBaseTransport):
    def __init__(self, gateway: Gateway) -> None:
        self._inner = GatewayTransport(gateway)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        content = await request.aread()
        inner = httpx.Request(
            request.method,
            str(request.url),
            headers=list(request.headers.multi_items()),
            content=content,
            extensions=request.extensions,
        )
        try:
            response = await self._inner.handle_async_request(inner)
        except httpx.ReadTimeout as exc:
            raise httpx2.ReadTimeout(str(exc), request=request) from None
        return httpx2.Response(
            response.status_code,
            headers=list(response.headers.multi_items()),
            stream=_Stream(response, request=request),
            request=request,
        )


class _Stream(httpx2.AsyncByteStream):
    def __init__(self, response: httpx.Response, *, request: httpx2.Request) -> None:
        self._response = response
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        stream = self._response.stream
        if not isinstance(stream, httpx.AsyncByteStream):
            raise TypeError("an async transport answers with an async stream")
        try:
            async for chunk in stream:
                yield chunk
        except httpx.ReadTimeout as exc:
            raise httpx2.ReadTimeout(str(exc), request=self._request) from None

    async def aclose(self) -> None:
        await self._response.aclose()
