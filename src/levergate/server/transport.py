"""`GatewayTransport`: an httpx transport that hands requests to the gateway's `Edge` in-process,
so `openai.AsyncOpenAI(http_client=httpx.AsyncClient(transport=gw.transport()))` runs the same
pipeline as the proxy, with no socket in between. Streams stay streams: each SSE frame reaches
the SDK as the pipeline produces it, and closing the response closes the upstream.

The client's timeout holds as it does over a socket: httpx's `read` timeout (the request's
`timeout` extension, which `AsyncOpenAI(timeout=...)` sets) bounds the wait for the response
and then for each frame of a stream; when it passes, the call is cancelled (which closes the
upstream) and `httpx.ReadTimeout` is raised, which the SDK reports as `APITimeoutError`. The
other phases (connect, write, pool) cost nothing in-process."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable
from typing import TYPE_CHECKING, TypeVar

import httpx

from levergate.core.call import Trace
from levergate.errors import PayloadTooLarge
from levergate.server.edge import Edge, error_response

if TYPE_CHECKING:
    from levergate.gateway import Gateway

T = TypeVar("T")


class GatewayTransport(httpx.AsyncBaseTransport):
    def __init__(self, gateway: Gateway) -> None:
        self._edge = Edge(gateway)
        self._limit = gateway.settings.server.max_body_bytes

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await within(read_timeout(request), self._handle(request), request=request)

    async def _handle(self, request: httpx.Request) -> httpx.Response:
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
            stream=_Frames(response.stream, request=request, read=read_timeout(request)),
            request=request,
        )


def read_timeout(request: httpx.Request) -> float | None:
    """The `read` phase of httpx's timeout extension (None: wait as long as it takes)."""
    timeouts = request.extensions.get("timeout")
    value = timeouts.get("read") if isinstance(timeouts, dict) else None
    return float(value) if isinstance(value, int | float) else None


async def within(seconds: float | None, awaitable: Awaitable[T], *, request: httpx.Request) -> T:
    """Await under the client's read timeout; past it, cancel and raise httpx.ReadTimeout."""
    if seconds is None:
        return await awaitable
    timer = asyncio.timeout(seconds)
    try:
        async with timer:
            return await awaitable
    except TimeoutError:
        if not timer.expired():
            raise
        raise httpx.ReadTimeout(
            f"levergate sent nothing within the client's read timeout of {seconds:g}s",
            request=request,
        ) from None


class _Frames(httpx.AsyncByteStream):
    def __init__(
        self, frames: AsyncGenerator[bytes, None], *, request: httpx.Request, read: float | None
    ) -> None:
        self._frames = frames
        self._request = request
        self._read = read

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while True:
            try:
                frame = await within(self._read, anext(self._frames), request=self._request)
            except StopAsyncIteration:
                return
            yield frame

    async def aclose(self) -> None:
        await self._frames.aclose()
