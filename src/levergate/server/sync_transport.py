"""`SyncGatewayTransport`: the in-process transport for synchronous clients.

    with httpx.Client(transport=SyncGatewayTransport(gw)) as http:
        client = openai.OpenAI(api_key="-", base_url="http://levergate/v1", http_client=http)
        client.chat.completions.create(model="m", messages=[...])

The gateway is asynchronous, so this transport gives it an event loop of its own on a
background thread and hands each request to `GatewayTransport` there: the same edge and
pipeline as the proxy and the async transport, timeouts included (httpx's `read` timeout is
honoured on the loop). The loop belongs to the transport: the gateway is started on it at
first use and closed with it (`httpx.Client.close()`), so a gateway served this way must not
also be used from another event loop.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, TypeVar

import httpx

from levergate.server.transport import GatewayTransport

if TYPE_CHECKING:
    from levergate.gateway import Gateway

T = TypeVar("T")


class SyncGatewayTransport(httpx.BaseTransport):
    def __init__(self, gateway: Gateway) -> None:
        if gateway.ready:
            raise RuntimeError(
                "this gateway is already started on an event loop; give SyncGatewayTransport a "
                "gateway that is not started: the transport runs it on a loop of its own"
            )
        self._gateway = gateway
        self._transport = GatewayTransport(gateway)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="levergate-sync-transport", daemon=True
        )
        self._thread.start()
        self._closed = False
        try:
            _run(self._loop, gateway.start())
        except BaseException:
            self.close()
            raise

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if self._closed:
            raise RuntimeError("this levergate transport is closed")
        body = request.read()
        inner = httpx.Request(
            request.method,
            request.url,
            headers=request.headers,
            content=body,
            extensions=request.extensions,
        )
        response = _run(self._loop, self._transport.handle_async_request(inner))
        stream = response.stream
        if isinstance(stream, httpx.AsyncByteStream) and not isinstance(
            stream, httpx.SyncByteStream
        ):
            return httpx.Response(
                response.status_code,
                headers=response.headers,
                stream=_SyncFrames(stream, loop=self._loop),
                request=request,
            )
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            content=_run(self._loop, response.aread()),
            request=request,
        )

    def close(self) -> None:
        """Close the gateway on its loop, then stop the loop and its thread."""
        if self._closed:
            return
        self._closed = True
        try:
            _run(self._loop, self._gateway.aclose())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._loop.close()


def _run(loop: asyncio.AbstractEventLoop, coroutine: Coroutine[Any, Any, T]) -> T:
    """Run `coroutine` on the transport's loop and wait for it from this thread."""
    future: Future[T] = asyncio.run_coroutine_threadsafe(coroutine, loop)
    return future.result()


class _SyncFrames(httpx.SyncByteStream):
    """A stream's frames pulled one by one across to the loop thread."""

    def __init__(self, stream: httpx.AsyncByteStream, *, loop: asyncio.AbstractEventLoop) -> None:
        self._frames = stream.__aiter__()
        self._stream = stream
        self._loop = loop

    def __iter__(self) -> Iterator[bytes]:
        while (frame := _run(self._loop, _next(self._frames))) is not None:
            yield frame

    def close(self) -> None:
        _run(self._loop, self._stream.aclose())


async def _next(frames: AsyncIterator[bytes]) -> bytes | None:
    """The next frame, or None at the end (StopAsyncIteration does not cross threads well)."""
    return await anext(frames, None)
