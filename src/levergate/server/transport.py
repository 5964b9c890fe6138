"""`GatewayTransport`: an httpx transport that hands requests to the gateway's `Edge` in-process,
so `openai.AsyncOpenAI(http_client=httpx.AsyncClient(transport=gw.transport()))` runs the same
pipeline as the proxy, with no socket in between. Streams stay streams: each SSE frame reaches
the SDK as the pipeline produces it, and closing the response closes the upstream."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from typing import TYPE_CHECKING

import httpx

from levergate.core.call import Trace
from levergate.errors import PayloadTooLarge
from levergate.server.edge import Edge, error_response

if TYPE_CHECKING:
    from levergate.gateway import Gateway


class GatewayTransport(httpx.AsyncBaseTransport):
    def __init__(self, gateway: Gateway) -> None:
        self._edge = Edge(gateway)
        self._limit = gateway.settings.server.max_body_bytes

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        trace = Trace()
        body = await request.aread()
        if len(body) > self._limit:
            response = error_response(PayloadTooLarge.over(self._limit))
        else:
            headers = {k.lower(): v for k, v in request.headers.items()}
            response = await self._edge.handle(
                request.method, request.url.path, headers, body, trace=trace
            )
        if response.stream is None:
            return httpx.Response(
                response.status, headers=response.headers, content=response.body, request=request
            )
        return httpx.Response(
            response.status,
            headers=response.headers,
            stream=_Frames(response.stream),
            request=request,
        )


class _Frames(httpx.AsyncByteStream):
    def __init__(self, frames: AsyncGenerator[bytes, None]) -> None:
        self._frames = frames

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for frame in self._frames:
            yield frame

    async def aclose(self) -> None:
        await self._frames.aclose()
