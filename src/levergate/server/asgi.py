"""The ASGI adapter over `Edge`: gives the edge the body as a source it reads whole or in chunks
under the route's limit (`_Body`), writes the response, sends a file from disk in chunks with
its content-length, and streams SSE frames one `send` per event, never waiting for more (under
`levergate serve` the sends of one event-loop turn leave in one write: `server.http_protocol`).
A watcher on `receive` turns a client disconnect into cancellation of the handling task, which
closes the stream and so the upstream connection. At the end of a graceful shutdown the server
asks the app to end what still runs (`end_requests`): each is cancelled the same way and answers
a `shutting_down` error, as an error event if its stream has begun. Lifespan events open and
close the gateway.

`levergate serve` does not go through ASGI: its HTTP protocol hands each request to `App.serve`
as a `server.http_cycle.Cycle`, the body's source and the answer's writer in one, and the same
edge answers it the same way (the ASGI route's scope, messages and header copies cost a proxied
request ~15% of its instructions)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from typing import Any

from levergate.config import Settings
from levergate.core.call import Trace
from levergate.errors import LevergateError, PayloadTooLarge, ShuttingDown
from levergate.gateway import Gateway
from levergate.server import access_log
from levergate.server.edge import Edge, error_response
from levergate.server.exchange import Response, body_cut_short, declared_length
from levergate.server.http_cycle import SHUTTING_DOWN_EVENT, Cycle
from levergate.server.reload import Reloader
from levergate.server.route import Route
from levergate.server.routes import ROUTES

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

log = logging.getLogger("levergate.server")


class App:
    def __init__(
        self,
        gateway: Gateway,
        *,
        routes: tuple[Route, ...] = ROUTES,
        load: Callable[[], Settings] | None = None,
        fan_out: Callable[[], None] | None = None,
    ) -> None:
        """`load`: how to read the configuration again, for a reload (server/reload.py);
        `fan_out`: how a worker has every worker reload (server/workers.py)."""
        self._routes = routes
        self.reloader = Reloader(self, load, fan_out=fan_out) if load is not None else None
        self.gateway = gateway
        self.edge = self._edge(gateway)
        self._watch_after = gateway.settings.server.disconnect_watch_after_seconds
        self._running: set[_Answering | Cycle] = set()
        # Set when a request that began on a pipeline since swapped out ends (a reload waits).
        self.ended = asyncio.Event()
        self._access_log = gateway.settings.server.access_log

    def _edge(self, gateway: Gateway) -> Edge:
        edge = Edge(gateway, routes=self._routes)
        edge.reloader = self.reloader
        return edge

    def swap(self, gateway: Gateway) -> None:
        """Serve new requests with `gateway` (a reload); running ones keep the edge they began
        on. The one place the app's pipeline is replaced. The large-body slots carry over when
        their settings did not change, so requests holding one still count (a fresh set would
        let twice the bound in until the old requests end)."""
        edge = self._edge(gateway)
        kept = self.edge.large
        if kept is not None and edge.large is not None and kept.settings == edge.large.settings:
            edge.large = kept
        self.gateway, self.edge = gateway, edge

    def running_on(self, gateway: Gateway) -> bool:
        """Whether a request (or a stream's body) is still being answered by `gateway`."""
        return any(
            answering.edge is not None and answering.edge.gateway is gateway
            for answering in self._running
        )

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
        trace = Trace.fresh()
        # ASGI servers deliver header names lower-cased already.
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        body = _Body(receive, headers)
        edge = self.edge  # a reload swaps it for later requests, never under this one
        answering = _Answering(receive, body, edge, after=self._watch_after)
        self._running.add(answering)
        response: Response | None = None
        try:
            response = await edge.handle(
                scope["method"], scope["path"], headers, body, trace=trace,
                query=scope.get("query_string", b"").decode("latin-1"),
            )  # fmt: skip
            body.done = True
            answering.answered = True
            answering.streaming = response.stream is not None
            await _send(send, response, head_only=scope["method"] == "HEAD", answering=answering)
        except asyncio.CancelledError:
            if not (answering.cut_short or answering.ended):
                raise
            # The client went away, or the server is stopping: swallow our own cancellation.
            _uncancel()
            if answering.ended and not answering.answered:
                response = error_response(ShuttingDown())
                await _send(send, response, head_only=False)
        except Exception:
            log.exception("unhandled error while serving %s", scope["path"])
            response = _internal_error()
            with contextlib.suppress(Exception):
                await _send(send, response, head_only=False)
        finally:
            answering.close()
            self._running.discard(answering)
            if answering.edge is not self.edge:
                self.ended.set()
            if self._access_log:
                status = access_log.CLIENT_CLOSED if response is None else response.status
                headers_out = () if response is None else response.headers
                access_log.write(scope, status=status, started=trace.started, headers=headers_out)

    async def serve(self, cycle: Cycle) -> None:
        """One request from the gateway's own HTTP protocol: what `_http` does, without ASGI.
        A client that goes away cancels the handler from the protocol's side (`Cycle.lose`)
        rather than through a watcher of `receive`."""
        trace = Trace.fresh()
        trace.loop = cycle.connection.loop  # Measure's, for the record (core/call.py)
        edge = self.edge  # a reload swaps it for later requests, never under this one
        cycle.edge = edge
        cycle.started = trace.started
        cycle.after = self._watch_after
        self._running.add(cycle)
        response: Response | None = None
        try:
            response = await edge.handle(cycle.method, cycle.path, cycle.headers, cycle,
                                         trace=trace, query=cycle.query)  # fmt: skip
            cycle.body_done = cycle.answered = True
            cycle.streaming = response.stream is not None
            await cycle.respond(response)
        except asyncio.CancelledError:
            if not (cycle.cut_short or cycle.ended):
                raise
            # The client went away, or the server is stopping: swallow our own cancellation.
            _uncancel()
            if cycle.ended and not cycle.answered:
                response = error_response(ShuttingDown())
                await cycle.respond(response)
        except Exception:
            log.exception("unhandled error while serving %s", cycle.path)
            response = _internal_error()
            if cycle.response_started:
                cycle.abort()
            else:
                with contextlib.suppress(Exception):
                    await cycle.respond(response)
        finally:
            cycle.over = True
            self._running.discard(cycle)
            handler = cycle.handler
            if handler is not None:  # out of the server's running tasks (http_protocol._start)
                cycle.connection.tasks.discard(handler)
            if edge is not self.edge:
                self.ended.set()
            if self._access_log:
                status = access_log.CLIENT_CLOSED if response is None else response.status
                query = cycle.query.encode("latin-1")
                scope = {"client": cycle.connection.client, "method": cycle.method,
                         "path": cycle.path, "query_string": query}  # fmt: skip
                headers_out = () if response is None else response.headers
                access_log.write(scope, status=status, started=trace.started, headers=headers_out)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await self.gateway.start()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self.reloader is not None:
                    await self.reloader.aclose()
                await self.gateway.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return


class _Body:
    """The request body as ASGI `receive` delivers it, read once by the edge: whole (`read`,
    today's fast path: one message for a small body) or as chunks (`chunks`, for a handler that
    writes them to disk). `done` tells the disconnect watcher that `receive` is its to call."""

    __slots__ = ("done", "headers", "receive")

    def __init__(self, receive: Receive, headers: dict[str, str]) -> None:
        self.receive = receive
        self.headers = headers
        self.done = False

    async def read(self, *, limit: int) -> bytes:
        declared_length(self.headers, limit=limit)
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await self.receive()
            if message["type"] == "http.disconnect":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise PayloadTooLarge.over(limit)
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        self.done = True
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    async def chunks(self, *, limit: int) -> AsyncIterator[bytes]:
        size = 0
        while True:
            message = await self.receive()
            if message["type"] == "http.disconnect":
                self.done = True
                raise body_cut_short()
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise PayloadTooLarge.over(limit)
            if chunk:
                yield chunk
            if not message.get("more_body", False):
                self.done = True
                return


class _Answering:
    """Cancels the handling task if the client disconnects while it is still answering.

    The watcher task starts only once a request has run for `after` seconds (1 s by default): a
    task per request was most of the edge's CPU cost at thousands of requests a second, and a
    request that ends sooner (a cache hit, a fast upstream) has little worth cancelling. Servers
    also report `http.disconnect` once the response is complete, hence the `over` flag. While
    the handler still reads the body (an upload), `receive` is the handler's: the watcher waits
    for the body to be done, checking again every `after` seconds."""

    __slots__ = (
        "after", "answered", "body", "cut_short", "edge", "ended", "handler", "over", "receive",
        "streaming", "timer", "watcher",
    )  # fmt: skip

    def __init__(self, receive: Receive, body: _Body, edge: Edge, *, after: float) -> None:
        self.edge = edge
        self.handler = asyncio.current_task()
        self.receive = receive
        self.body = body
        self.after = after
        self.over = False
        self.cut_short = False
        self.ended = False  # by the server's shutdown (App.end_requests)
        self.answered = False  # the response is being sent
        self.streaming = False
        self.watcher: asyncio.Task[None] | None = None
        self.timer = asyncio.get_running_loop().call_later(after, self._start)

    def _start(self) -> None:
        if self.over:
            return
        if not self.body.done:
            self.timer = asyncio.get_running_loop().call_later(self.after, self._start)
            return
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
    stream = response.stream
    if stream is None:
        headers.append((b"content-length", str(len(response.body)).encode()))
    elif response.length is not None:
        headers.append((b"content-length", str(response.length).encode()))
    await send({"type": "http.response.start", "status": response.status, "headers": headers})
    if stream is None:
        await send({"type": "http.response.body", "body": b"" if head_only else response.body})
        return
    try:
        if not head_only:
            async for frame in stream:
                await send({"type": "http.response.body", "body": frame, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
    except asyncio.CancelledError:
        if answering is None or not answering.ended:
            raise
        _uncancel()
        if response.length is None:  # an SSE stream; a file cut short just ends
            await send({"type": "http.response.body", "body": SHUTTING_DOWN_EVENT})
    finally:
        await stream.aclose()


def _uncancel() -> None:
    handler = asyncio.current_task()
    if handler is not None:
        handler.uncancel()


def _internal_error() -> Response:
    return error_response(
        LevergateError("The gateway failed to serve this request.", code="internal")
    )
