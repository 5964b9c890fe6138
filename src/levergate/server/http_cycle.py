"""One request on a connection and its answer, in place of uvicorn's `RequestResponseCycle`:
`server.http_protocol` hands the parsed request to the app (`App.serve`) as a `Cycle`, which is
the body's source (`read`, `chunks`) and writes the `Response` itself (`respond`), with no ASGI
message, scope or second copy of the headers between them.

Why: the ASGI route cost a proxied request ~15% of the gateway's instructions (callgrind,
benchmarks/results/instructions.md): the scope, the messages, the request headers decoded
and the response headers encoded pair by pair, then two regular-expression searches per
response header in uvicorn, the head held by a transport that recognised it by its shape. Here
the head is one string joined and encoded once, and checked by one scan over it.

What it keeps of uvicorn's cycle: `100 Continue` on the first read of a body the client waits to
send; reading paused while more than 64 KiB of body wait for the handler; `content-length`
for a whole answer and a file, chunked framing for a stream (bare bytes to an HTTP/1.0 client,
whose connection's close ends the body); no body for HEAD; `connection: close` and the close
when the connection is not kept alive (HTTP/1.0, the client's `connection: close`, the server
shutting down); a wait before each body write while the client's socket is full; nothing
written once the client has gone. Writes: a whole answer is one write, head and body (a body
over 64 KiB follows it); a stream's head leaves with its first chunk, and its later chunks are
gathered into one write per turn of the event loop (`server.http_writes`).

A header name or value with a control character other than tab (above all CR or LF, which would
start a header or a response of its own on the wire) is never written: the answer fails
before any byte of it leaves (a 500). The check is one pass over the joined header lines.

A client that goes away cancels its request's handler once the request has run
`disconnect_watch_after_seconds` (as the ASGI adapter's watcher does, without its timer per
request); a body still being read ends with `incomplete_body`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import orjson
from uvicorn.protocols.http.flow_control import HIGH_WATER_LIMIT, FlowControl
from uvicorn.protocols.http.httptools_impl import STATUS_LINE

from levergate.errors import PayloadTooLarge, ShuttingDown
from levergate.protocol.sse import encode
from levergate.server.exchange import Response, body_cut_short, declared_length
from levergate.server.http_writes import JOIN_AT_MOST, Coalescing

if TYPE_CHECKING:
    from levergate.server.edge import Edge

_STATUS = {status: line.decode("latin-1") for status, line in STATUS_LINE.items()}
# The control characters but tab (which a header value may hold).
_CONTROL = bytes([*range(0x09), *range(0x0A, 0x20), 0x7F])
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_LAST_CHUNK = b"0\r\n\r\n"
# A stream cut by the end of a graceful shutdown ends with this event (server.asgi's too).
SHUTTING_DOWN_EVENT = encode(orjson.dumps(ShuttingDown().to_json()))


class UnsafeHeader(RuntimeError):
    """A response header that would change the framing on the wire (never written)."""


def encode_head(status: int, headers: list[tuple[str, str]], framing: str) -> bytes:
    """The status line, `headers` and `framing` (the gateway's own lines, each ending in CRLF),
    then the blank line; `UnsafeHeader` if a name or value holds a control character but tab."""
    # Each (name, value) joined by ": " in C (`map`), not a formatted string a header.
    lines = "\r\n".join(map(": ".join, headers)) + "\r\n" if headers else ""
    head = (_STATUS[status] + lines + framing + "\r\n").encode("latin-1")
    # One pass: each line's CRLF is two control characters; any other control character (a CR
    # or LF in a name or value above all) is one more. Deleting them is a table lookup a byte,
    # a third of a regular expression's search.
    breaks = 2 + len(headers) + framing.count("\n")
    if len(head) - len(head.translate(None, _CONTROL)) != 2 * breaks:
        raise UnsafeHeader("a response header holds a control character; not written")
    return head


@dataclass(frozen=True, slots=True)
class Connection:
    """What the requests of one connection share: its writes, its flow control, the protocol's
    callback for an answer written in whole, the peer's address (for the access log), and the
    server's set of running request tasks (a graceful shutdown waits for it to empty), which
    `App.serve` leaves itself as it ends."""

    writes: Coalescing
    flow: FlowControl
    on_response: Callable[[], None]
    client: tuple[str, int] | None
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    # The loop the connection is served on (None: unknown; then asked of asyncio).
    loop: asyncio.AbstractEventLoop | None = None


class Cycle:
    """One request (`method`, `path`, `query`, `headers`: lower-cased names, latin-1 text) and
    its answer. The protocol feeds the body (`received`, `ended_body`) and tells of a lost client
    (`lose`); `App.serve` reads the body through it and answers with `respond`, and ends it at
    shutdown (`end`)."""

    __slots__ = (
        "_waiter", "after", "answered", "body", "body_done", "connection", "cut_short",
        "disconnected", "edge", "ended", "handler", "head_only", "headers", "keep_alive",
        "method", "more_body", "over", "path", "query", "response_complete", "response_started",
        "started", "streaming", "unchunked", "waiting_for_100_continue",
    )  # fmt: skip

    # Positional: built once per request on the hot path (keyword arguments cost more).
    def __init__(
        self, connection: Connection, method: str, path: str, query: str,
        headers: dict[str, str], /,
    ) -> None:  # fmt: skip
        self.connection = connection
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.head_only = method == "HEAD"
        # Set by the protocol after the fact, when they are not the usual: HTTP/1.0 knows no
        # chunked encoding (a stream is sent bare and the close ends it); the connection ends
        # after this answer; the client waits for `100 Continue` before it sends the body.
        self.unchunked = False
        self.keep_alive = True
        self.waiting_for_100_continue = False
        # The body as it arrives, until the handler takes it.
        self.body = b""
        self.more_body = True
        self.body_done = False
        self._waiter: asyncio.Future[None] | None = None
        self.disconnected = False
        self.response_started = False
        self.response_complete = False
        # Set by `App.serve`: the handling task, the edge it runs on, when it began, and how
        # long a request runs before a lost client cancels it.
        self.handler: asyncio.Task[None] | None = None
        self.edge: Edge | None = None
        self.started = 0.0
        self.after = 0.0
        self.answered = self.streaming = self.cut_short = self.ended = self.over = False

    # ---- the protocol's side -------------------------------------------------------------------

    def received(self, data: bytes) -> None:
        if self.response_complete:
            return  # answered already: the rest of the body is not wanted
        self.body = self.body + data if self.body else data
        if len(self.body) > HIGH_WATER_LIMIT:
            self.connection.flow.pause_reading()
        self._wake()

    def ended_body(self) -> None:
        if not self.response_complete:
            self.more_body = False
            self._wake()

    def lose(self) -> None:
        """The client went away (or its request was refused while its body arrived)."""
        self.disconnected = True
        self._wake()
        if self.response_complete or self.handler is None or not self.body_done:
            return  # a body still read ends with `incomplete_body` instead
        wait = self.started + self.after - time.perf_counter()
        if wait <= 0:
            self._cancel()
        else:
            asyncio.get_running_loop().call_later(wait, self._cancel)

    def end(self) -> None:
        """The server's graceful shutdown is over (`App.end_requests`): stop the handler."""
        if not self.over and self.handler is not None:
            self.ended = True
            self.handler.cancel()

    def _cancel(self) -> None:
        if not self.over and self.handler is not None:
            self.cut_short = True
            self.handler.cancel()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # ---- the body, as the edge reads it (exchange.BodySource) -----------------------------------

    def arrived(self, *, limit: int) -> bytes | None:
        """The whole body if all of it has arrived (a small request comes in one read), held to
        `limit` as `read` holds it; None while more is due (then `read`). The edge takes it
        without a coroutine. The declared content-length is checked only while more is due
        (a 413 before the rest arrives): a body all there is held by its own length, which its
        framing made the declared one (~700 instructions a request fewer)."""
        if self.more_body:
            declared_length(self.headers, limit=limit)
            return None
        body, self.body = self.body, b""
        if len(body) > limit:
            raise PayloadTooLarge.over(limit)
        self.body_done = True
        return body

    async def read(self, *, limit: int) -> bytes:
        body = self.arrived(limit=limit)
        return body if body is not None else await self._rest(limit)

    async def _rest(self, limit: int) -> bytes:
        return b"".join([part async for part in self.chunks(limit=limit)])

    async def chunks(self, *, limit: int) -> AsyncIterator[bytes]:
        size = 0
        while True:
            body, self.body = self.body, b""
            size += len(body)
            if size > limit:
                raise PayloadTooLarge.over(limit)
            if body:
                yield body
            if not self.more_body:
                self.body_done = True
                return
            await self._arrival()

    async def _arrival(self) -> None:
        """Wait for more of the body; `incomplete_body` if the client has gone."""
        if self.disconnected:
            raise body_cut_short()
        if self.waiting_for_100_continue:
            self.waiting_for_100_continue = False
            if not self.connection.writes.is_closing():
                self.connection.writes.write_now(_CONTINUE)
        self.connection.flow.resume_reading()
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None
        if self.disconnected:
            raise body_cut_short()

    # ---- the answer --------------------------------------------------------------------------

    async def respond(self, response: Response) -> None:
        """Write `response`; a stream is closed whatever happens."""
        stream = response.stream
        if stream is not None:
            try:
                await self._stream(response, stream)
            finally:
                await stream.aclose()
            return
        # A whole answer, here rather than in a coroutine of its own (~1k instructions).
        flow = self.connection.flow
        if flow.write_paused and not self.disconnected:
            await flow.drain()
        if self.disconnected:
            return
        self.response_started = True
        body = response.body
        framing = f"content-length: {len(body)}\r\n"
        if not self.keep_alive:
            framing += "connection: close\r\n"
        head = encode_head(response.status, response.headers, framing)
        writes = self.connection.writes
        if self.head_only or not body:
            writes.write_now(head)
        elif len(body) <= JOIN_AT_MOST:
            writes.write_now(head + body)
        else:
            writes.write_now(head)
            writes.write_now(body)
        self._complete()

    async def _stream(self, response: Response, stream: AsyncIterator[bytes]) -> None:
        length = response.length
        chunked = length is None and not self.unchunked
        if length is not None:
            framing = f"content-length: {length}\r\n"
        elif chunked:
            framing = "transfer-encoding: chunked\r\n"
        else:
            framing = ""
        if not self.keep_alive:
            framing += "connection: close\r\n"
        head: bytes | None = encode_head(response.status, response.headers, framing)
        writes = self.connection.writes
        flow = self.connection.flow
        self.response_started = True
        sent = 0
        if not self.head_only:
            try:
                async for data in stream:
                    if not data:
                        continue
                    size = len(data)
                    sent += size
                    if length is not None and sent > length:
                        raise RuntimeError("Response content longer than Content-Length")
                    frame = b"%x\r\n%s\r\n" % (size, data) if chunked else data
                    if flow.write_paused and not self.disconnected:
                        await flow.drain()
                    if self.disconnected:
                        return
                    if head is not None:  # the head leaves with the first chunk
                        writes.write_now(head + frame)
                        head = None
                    else:
                        writes.write(frame)
            except asyncio.CancelledError:
                if not self.ended:
                    raise
                _uncancel()
                if length is not None:  # a file cut short just ends, with the connection
                    self.abort()
                    return
                event = SHUTTING_DOWN_EVENT
                frame = b"%x\r\n%s\r\n" % (len(event), event) if chunked else event
                if head is not None:
                    writes.write_now(head + frame)
                    head = None
                else:
                    writes.write(frame)
            else:
                if length is not None and sent != length:
                    raise RuntimeError("Response content shorter than Content-Length")
        if self.disconnected:
            return
        end = _LAST_CHUNK if chunked and not self.head_only else b""
        if head is not None:
            writes.write_now(head + end)
        elif end:
            writes.write(end)
        self._complete()

    def abort(self) -> None:
        """The answer failed after its head went out: the client sees the connection end."""
        self.keep_alive = False
        self.connection.writes.close()

    def _complete(self) -> None:
        self.response_complete = True
        if not self.keep_alive:
            self.connection.writes.close()
        self.connection.on_response()


def _uncancel() -> None:
    task = asyncio.current_task()
    if task is not None:
        task.uncancel()
