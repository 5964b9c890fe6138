"""`GatewayTransport`: an httpx transport that hands requests to the gateway's `Edge` in-process,
so `openai.AsyncOpenAI(http_client=httpx.AsyncClient(transport=gw.transport()))` runs the same
pipeline as the proxy, with no socket in between. Streams stay streams: each SSE frame reaches
the SDK as the pipeline produces it, and closing the response closes the upstream. Request
bodies reach the edge as a source (`_Body`) it reads whole or in chunks under the route's limit,
and a file response is read from disk as the client reads it.

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
from levergate.server.edge import Edge
from levergate.server.exchange import declared_length
from levergate.server.routes import ROUTES, Route

if TYPE_CHECKING:
    from levergate.gateway import Gateway

T = TypeVar("T")


class GatewayTransport(httpx.AsyncBaseTransport):
    def __init__(self, gateway: Gateway, *, routes: tuple[Route, ...] = ROUTES) -> None:
        self._edge = Edge(gateway, routes=routes)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await within(read_timeout(request), self._handle(request), request=request)

    async def _handle(self, request: httpx.Request) -> httpx.Response:
        trace = Trace()
        headers = {k.lower(): v for k, v in request.headers.items()}
        response = await self._edge.handle(
            request.method, request.url.path, headers, _Body(request, headers), trace=trace
        )
        if response.stream is None:
            return httpx.Response(
                response.status, headers=response.headers, content=response.body, request=request
            )
        head = response.headers
        if response.length is not None:
            head = [*head, ("content-length", str(response.length))]
        if request.method == "HEAD":
            # The head only: the file (or stream) behind it is never read.
            await response.stream.aclose()
            return httpx.Response(response.status, headers=head, request=request)
        return httpx.Response(
            response.status,
            headers=head,
            stream=_Frames(response.stream, request=request, read=read_timeout(request)),
            request=request,
        )


class _Body:
    """The httpx request's body for the edge: the bytes httpx already holds when the caller
    passed them (the SDK's JSON), else its stream, read under the route's limit either way."""

    __slots__ = ("_headers", "_request")

    def __init__(self, request: httpx.Request, headers: dict[str, str]) -> None:
        self._request = request
        self._headers = headers

    async def read(self, *, limit: int) -> bytes:
        declared_length(self._headers, limit=limit)
        try:
            body = self._request.content
        except httpx.RequestNotRead:
            body = b"".join([chunk async for chunk in self.chunks(limit=limit)])
        if len(body) > limit:
            raise PayloadTooLarge.over(limit)
        return body

    async def chunks(self, *, limit: int) -> AsyncIterator[bytes]:
        size = 0
        stream = self._request.stream
        if not isinstance(stream, httpx.AsyncByteStream):
            raise TypeError("an async transport needs an async request body")
        async for chunk in stream:
            size += len(chunk)
            if size > limit:
                raise PayloadTooLarge.over(limit)
            yield chunk


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
