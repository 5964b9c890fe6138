"""The in-process transports (`server/transport.py`, `server/sync_transport.py`) for clients
built on `httpx2`, the fork of httpx the official `anthropic` SDK (2.x) requires of an
`http_client`:

    claude = anthropic.AsyncAnthropic(api_key="-", base_url="http://levergate",
                                      http_client=httpx2.AsyncClient(transport=Httpx2Transport(gw)))
    claude = anthropic.Anthropic(api_key="-", base_url="http://levergate",
                                 http_client=httpx2.Client(transport=SyncHttpx2Transport(gw)))

Each hands the request to the httpx transport of its kind — `GatewayTransport` (one edge, one
pipeline, the same behaviour as the proxy), or `SyncGatewayTransport` (the same on a loop thread
of its own, for synchronous code) — and only moves the request and the response across the two
libraries' types: the body is read whole (the edge still holds it to the route's limit), a
response stream stays a stream frame by frame, closing it closes the upstream, and the client's
read timeout arrives as `httpx2.ReadTimeout`, which the SDK reports as `APITimeoutError`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING

import httpx
import httpx2

from levergate.server.sync_transport import SyncGatewayTransport
from levergate.server.transport import GatewayTransport

if TYPE_CHECKING:
    from levergate.gateway import Gateway


class Httpx2Transport(httpx2.AsyncBaseTransport):
    def __init__(self, gateway: Gateway) -> None:
        self._inner = GatewayTransport(gateway)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        inner = _to_httpx(request, await request.aread())
        try:
            response = await self._inner.handle_async_request(inner)
        except httpx.ReadTimeout as exc:
            raise httpx2.ReadTimeout(str(exc), request=request) from None
        return _from_httpx(response, request=request, stream=_Stream(response, request=request))


class SyncHttpx2Transport(httpx2.BaseTransport):
    """For `anthropic.Anthropic`: the gateway runs on the loop thread `SyncGatewayTransport`
    owns, started now and closed with the client (`httpx2.Client.close()`)."""

    def __init__(self, gateway: Gateway) -> None:
        self._inner = SyncGatewayTransport(gateway)

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        inner = _to_httpx(request, request.read())
        try:
            response = self._inner.handle_request(inner)
        except httpx.ReadTimeout as exc:
            raise httpx2.ReadTimeout(str(exc), request=request) from None
        stream = _SyncStream(response, request=request)
        return _from_httpx(response, request=request, stream=stream)

    def close(self) -> None:
        self._inner.close()


def _to_httpx(request: httpx2.Request, content: bytes) -> httpx.Request:
    return httpx.Request(
        request.method,
        str(request.url),
        headers=list(request.headers.multi_items()),
        content=content,
        extensions=request.extensions,
    )


def _from_httpx(
    response: httpx.Response,
    *,
    request: httpx2.Request,
    stream: httpx2.AsyncByteStream | httpx2.SyncByteStream,
) -> httpx2.Response:
    return httpx2.Response(
        response.status_code,
        headers=list(response.headers.multi_items()),
        stream=stream,
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


class _SyncStream(httpx2.SyncByteStream):
    def __init__(self, response: httpx.Response, *, request: httpx2.Request) -> None:
        self._response = response
        self._request = request

    def __iter__(self) -> Iterator[bytes]:
        stream = self._response.stream
        if not isinstance(stream, httpx.SyncByteStream):
            raise TypeError("a sync transport answers with a sync stream")
        try:
            yield from stream
        except httpx.ReadTimeout as exc:
            raise httpx2.ReadTimeout(str(exc), request=self._request) from None

    def close(self) -> None:
        self._response.close()
