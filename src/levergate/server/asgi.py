"""The ASGI adapter over `Edge`: reads the body under the size limit, writes the response, and
streams SSE frames one `send` per event, never waiting for more (under `levergate serve` the
sends of one event-loop turn leave in one write: `server.http_protocol`). A watcher on
`receive` turns a client disconnect into cancellation of the handling task, which closes the
stream and so the upstream connection. At the end of a graceful shutdown the server asks the app
to end what still runs (`end_requests`): each is cancelled the same way and answers a
`shutting_down` error, as an error event if its stream has begun. Lifespan events open and close
the gateway."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import orjson

from levergate.core.call import Trace
from levergate.errors import LevergateError, PayloadTooLarge, ShuttingDown
from levergate.gateway import Gateway
from levergate.protocol.sse import encode
from levergate.server.edge import Edge, Response, error_response

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

log = logging.getLogger("levergate.server")


class App:
    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.edge = Edge(gateway)
        self._limit = gateway.settings.server.max_body_bytes
        self._watch_after = gateway.settings.server.disconnect_watch_after_seconds
        self._running: set[_Answering] = set()

    def end_requests(self) -> tuple[int, int]:
        """End every request still being answered (server/run.py calls this once the graceful
        shutdown time is over); returns how many were streams and how many were not."""
        running = list(self._running)
        for answering in running:
            answering.end()
        streams = sum(answering.streaming for answering in running)
        return streams, len(running) - streams

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self._http(scope, receive, send)
        elif scope["type"] == "lifespan":
            await self._lifespan(receive, send)

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        trace = Trace()
        # ASGI servers deliver header names lower-cased already.
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        try:
            body = await _read_body(receive, headers, self._limit)
        except LevergateError as exc:
            await _send(send, error_response(exc), head_only=False)
            return
        answering = _Answering(receive, after=self._watch_after)
        self._running.add(answering)
        try:
            response = await self.edge.handle(
                scope["method"], scope["path"], headers, body, trace=trace
            )
            answering.answered = True
            answering.streaming = response.stream is not None
            await _send(send, response, head_only=scope["method"] == "HEAD", answering=answering)
        except asyncio.CancelledError:
            if not (answering.cut_short or answering.ended):
                raise
            # The client went away, or the server is stopping: swallow our own cancellation.
            _uncancel()
            if answering.ended and not answering.answered:
                await _send(send, error_response(ShuttingDown()), head_only=False)
        except Exception:
            log.exception("unhandled error while serving %s", scope["path"])
            with contextlib.suppress(Exception):
                await _send(send, _internal_error(), head_only=False)
        finally:
            answering.close()
            self._running.discard(answering)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await self.gateway.start()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.gateway.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return


async def _read_body(receive: Receive, headers: dict[str, str], limit: int) -> bytes:
    declared = headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge.over(limit)
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge.over(limit)
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


class _Answering:
    """Cancels the handling task if the client disconnects while it is still answering.

    The watcher task starts only once a request has run for `after` seconds (1 s by default): a
    task per request was most of the edge's CPU cost at thousands of requests a second, and a
    request that ends sooner (a cache hit, a fast upstream) has little worth cancelling. Servers
    also report `http.disconnect` once the response is complete, hence the `over` flag."""

    __slots__ = (
        "answered", "cut_short", "ended", "handler", "over", "receive", "streaming", "timer",
        "watcher",
    )  # fmt: skip

    def __init__(self, receive: Receive, *, after: float) -> None:
        self.handler = asyncio.current_task()
        self.receive = receive
        self.over = False
        self.cut_short = False
        self.ended = False  # by the server's shutdown (App.end_requests)
        self.answered = False  # the response is being sent
        self.streaming = False
        self.watcher: asyncio.Task[None] | None = None
        self.timer = asyncio.get_running_loop().call_later(after, self._start)

    def _start(self) -> None:
        if not self.over:
            self.watcher = asyncio.create_task(self._watch())

    async def _watch(self) -> None:
        while True:
            message = await self.receive()
            if message["type"] == "http.disconnect":
                if not self.over and self.handler is not None:
                    self.cut_short = True
                    self.handler.cancel()
                return

    def end(self) -> None:
        if not self.over and self.handler is not None:
            self.ended = True
            self.handler.cancel()

    def close(self) -> None:
        self.over = True
        self.timer.cancel()
        if self.watcher is not None:
            self.watcher.cancel()


async def _send(
    send: Send, response: Response, *, head_only: bool, answering: _Answering | None = None
) -> None:
    headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in response.headers]
    if response.stream is None:
        headers.append((b"content-length", str(len(response.body)).encode()))
    await send({"type": "http.response.start", "status": response.status, "headers": headers})
    if response.stream is None:
        await send({"type": "http.response.body", "body": b"" if head_only else response.body})
        return
    try:
        async for frame in response.stream:
            await send({"type": "http.response.body", "body": frame, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
    except asyncio.CancelledError:
        if answering is None or not answering.ended:
            raise
        _uncancel()
        await send({"type": "http.response.body", "body": _SHUTTING_DOWN_EVENT})
    finally:
        await response.stream.aclose()


_SHUTTING_DOWN_EVENT = encode(orjson.dumps(ShuttingDown().to_json()))


def _uncancel() -> None:
    handler = asyncio.current_task()
    if handler is not None:
        handler.uncancel()


def _internal_error() -> Response:
    return error_response(
        LevergateError("The gateway failed to serve this request.", code="internal")
    )
