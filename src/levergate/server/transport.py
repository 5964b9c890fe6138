"""`GatewayTransport`: an httpx transport that hands requests to the gateway's `Edge` in-process,
so `openai.AsyncOpenAI(http_client=httpx.AsyncClient(transport=GatewayTransport(gw)))` runs the same
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
from collections.abc import AsyncGenerator, AsyncIterator
from typing import TYPE_CHECKING

import httpx

from levergate.core.call import Trace
from levergate.core.clock import loop_clock
from levergate.errors import PayloadTooLarge
from levergate.server.edge import Edge
from levergate.server.exchange import declared_length
from levergate.server.route import Route
from levergate.server.routes import ROUTES

if TYPE_CHECKING:
    from levergate.gateway import Gateway


class GatewayTransport(httpx.AsyncBaseTransport):
    def __init__(self, gateway: Gateway, *, routes: tuple[Route, ...] = ROUTES) -> None:
        self._edge = Edge(gateway, routes=routes)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        seconds = read_timeout(request)
        if seconds is None:
            return await self._handle(request)
        watch = _Watch(seconds)
        watch.waiting()
        try:
            return await self._handle(request)
        except asyncio.CancelledError:
            if not watch.fired:
                raise
            raise _timed_out(seconds, request) from None
        finally:
            watch.close()

    async def _handle(self, request: httpx.Request) -> httpx.Response:
        trace = Trace.fresh()
        headers = {k.lower(): v for k, v in request.headers.items()}
        response = await self._edge.handle(
            request.method, request.url.path, headers, _Body(request, headers), trace=trace,
            query=request.url.query.decode("latin-1"),
        )  # fmt: skip
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


def _timed_out(seconds: float, request: httpx.Request) -> httpx.ReadTimeout:
    return httpx.ReadTimeout(
        f"levergate sent nothing within the client's read timeout of {seconds:g}s",
        request=request,
    )


class _Frames(httpx.AsyncByteStream):
    def __init__(
        self, frames: AsyncGenerator[bytes, None], *, request: httpx.Request, read: float | None
    ) -> None:
        self._frames = frames
        self._request = request
        self._read = read

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._read is None:
            async for frame in self._frames:
                yield frame
            return
        watch = _Watch(self._read)
        try:
            while True:
                watch.waiting()
                try:
                    frame = await anext(self._frames)
                except StopAsyncIteration:
                    return
                except asyncio.CancelledError:
                    if not watch.fired:
                        raise
                    raise _timed_out(self._read, self._request) from None
                watch.since = None
                yield frame
        finally:
            watch.close()

    async def aclose(self) -> None:
        await self._frames.aclose()


class _Watch:
    """The client's read timeout: one timer for a whole response, not one per frame (an
    `asyncio.timeout` per frame was a third of an in-process stream's CPU). Each wait (for the
    response, then for each frame) notes when it began; the timer, when it comes due, cancels
    the reading task if the current wait has lasted `seconds`, and otherwise sets itself for
    when it would. Time the client spends between frames does not count, as over a socket."""

    __slots__ = ("_handle", "_loop", "_now", "_seconds", "_task", "fired", "since")

    def __init__(self, seconds: float) -> None:
        self._loop = asyncio.get_running_loop()
        self._now = loop_clock(self._loop)
        self._seconds = seconds
        self._task: asyncio.Task[object] | None = None
        self._handle: asyncio.TimerHandle | None = None
        self.since: float | None = None
        self.fired = False

    def waiting(self) -> None:
        self.since = self._now()
        if self._task is None:  # a response is read by one task: found once
            self._task = asyncio.current_task()
        if self._handle is None:
            self._handle = self._loop.call_at(self.since + self._seconds, self._due)

    def _due(self) -> None:
        self._handle = None
        if self.since is None:
            return  # not waiting now: the next wait sets the timer again
        due = self.since + self._seconds
        if self._loop.time() >= due and self._task is not None:
            self.fired = True
            self._task.cancel()
        else:
            self._handle = self._loop.call_at(due, self._due)

    def close(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
