"""`H1Client`: a lean HTTP/1.1 keep-alive client for cleartext upstreams.

Why not aiohttp here: measured on this machine (benchmarks/results/server_choice.md), aiohttp
spends ~190 µs of CPU per small proxied request, the largest single share of the gateway's
budget; this client, which does only what an OpenAI-compatible upstream needs, spends a
fraction of that. What it does: a pool of keep-alive connections per upstream (LIFO, bounded,
idle ones expire), one write per request, responses parsed by httptools (the parser uvicorn
uses; content-length, chunked and close-delimited bodies), bodies streamed with back-pressure.

A large request body (beyond `_ONE_WRITE`: a Responses conversation reaches 32 MiB) is not
joined behind its head: the head goes alone, then the body in `_SLICE`-sized views of it, each
written once the transport has drained below its low-water mark, the loop given back between
them. Joined, a body was copied whole once more (head + body), and the transport buffered what
the socket did not take at once (asyncio's copies it again); the soak (issue 20) measured
those writes as one of the largest things a hostile tenant put on the gateway's loop.
What it leaves to others: TLS, HTTP/2, proxies, redirects and compression (it asks for none) —
`https://` upstreams go to httpx (`client.client_for`).

A connection goes back to the pool only after its response was read to the end; one closed by
the server while idle is detected, and a request that found such a connection dead before any
byte of an answer arrived is sent again once on a fresh connection. Bytes no request asked for
(arriving on an idle pooled connection, or a second response after the one a request got) close
the connection and are counted (`H1Client.unsolicited`): parsed, they would be the next
request's answer, or lengthen the current one's body.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import time
from collections.abc import AsyncIterator, Mapping
from functools import partial
from typing import cast
from urllib.parse import unquote, urlsplit

import httptools

from levergate.config import UpstreamSettings
from levergate.upstreams.wire import TransportFailed

_HIGH_WATER = 1 << 20  # buffered body bytes before the socket is paused
_ONE_WRITE = 64 * 1024  # a request body up to this goes in one write with its head
_SLICE = 256 * 1024  # a larger body goes in views of this many bytes, under flow control


class _Connection(asyncio.Protocol):
    """One socket and its one parser, reused by every request the connection carries. Parser
    callbacks fill `headers`, `chunks`; the `head` future and a plain future (`wait`) wake the
    request's reader. `busy` from a request's send until the connection is pooled again: bytes
    arriving while it is not (or a second response to one request) were never asked for, and
    the connection is closed instead of handing them to the next request as its answer."""

    def __init__(self, client: H1Client) -> None:
        self.transport: asyncio.Transport | None = None
        self._client = client
        self._loop = asyncio.get_running_loop()
        self.parser = httptools.HttpResponseParser(self)
        self.lost = False
        self.busy = False
        self.used_at = time.monotonic()
        self.reused = False
        # Cleared while the transport's write buffer is above its high-water mark.
        self.writable = asyncio.Event()
        self.writable.set()
        self.chunks: collections.deque[bytes] = collections.deque()
        self._waiter: asyncio.Future[None] | None = None
        self._stray = False
        self._reset()

    def _reset(self) -> None:
        self.status = 0
        self.headers: dict[str, str] = {}
        self.chunks.clear()
        self.buffered = 0
        self.head: asyncio.Future[None] = self._loop.create_future()
        self.complete = False
        self.keep_alive = False
        self.got_bytes = False
        self.error: Exception | None = None
        self.cut_short = False  # the request's body was not all sent: never reused

    def wait(self) -> asyncio.Future[None]:
        """A future done at the next body bytes, the message's end or a failure."""
        waiter = self._waiter = self._loop.create_future()
        return waiter

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    # -- asyncio.Protocol --
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (uvloop's does not subclass asyncio.Transport, hence the cast).
        self.transport = cast("asyncio.Transport", transport)

    def data_received(self, data: bytes) -> None:
        if not self.busy:
            self._unsolicited()
            return
        self.got_bytes = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            if self._stray:
                self._unsolicited()  # the answer before it stands: it was complete
            else:
                self._fail(TransportFailed(f"invalid HTTP response: {exc}"))

    def _unsolicited(self) -> None:
        """Bytes no request asked for: the server is out of step with this connection."""
        self._client.unsolicited += 1
        self.close()

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.writable.set()  # a body still being written stops
        if self.complete:
            return
        if self.head.done() and exc is None and self._close_delimited():
            self.on_message_complete()  # a body without length or chunks ends with the socket
            return
        reason = str(exc) if exc else "connection closed by the upstream"
        self._fail(TransportFailed(reason))

    def _close_delimited(self) -> bool:
        chunked = "chunked" in self.headers.get("transfer-encoding", "")
        return not chunked and "content-length" not in self.headers

    # -- httptools callbacks --
    def on_message_begin(self) -> None:
        if self.complete:  # a second response to one request: stop the parser here
            self._stray = True
            raise TransportFailed("a response no request asked for")

    def on_header(self, name: bytes, value: bytes) -> None:
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        self.headers[key] = f"{self.headers[key]}, {text}" if key in self.headers else text

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        # Read here: once the message is complete the parser has moved on and says False.
        self.keep_alive = self.parser.should_keep_alive()
        if not self.head.done():
            self.head.set_result(None)

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)
        self.buffered += len(body)
        if self._waiter is not None:  # `_wake`'s own test: a stream's later chunks find none
            self._wake()
        if self.buffered > _HIGH_WATER and self.transport is not None:
            self.transport.pause_reading()

    def on_message_complete(self) -> None:
        self.complete = True
        self._wake()

    def _fail(self, error: Exception) -> None:
        self.error = error
        if not self.head.done():
            self.head.set_exception(error)
        self._wake()
        self.close()

    # -- used by the client --
    def send_now(self, head: bytes, body: bytes) -> None:
        """Write a request whose body goes with its head (at most `_ONE_WRITE` bytes), with no
        wait; a failure is the `head` future's (the answer's wait raises it)."""
        self._reset()
        self.busy = True
        transport = self.transport
        if transport is None or self.lost:
            self._fail(TransportFailed("connection closed by the upstream"))
            return
        transport.write(head + body)

    async def send(self, head: bytes, body: bytes) -> None:
        """Write a request; a failure is the `head` future's (the answer's wait raises it)."""
        if len(body) <= _ONE_WRITE:
            self.send_now(head, body)
            return
        self._reset()
        self.busy = True
        transport = self.transport
        if transport is None or self.lost:
            self._fail(TransportFailed("connection closed by the upstream"))
            return
        transport.write(head)
        view = memoryview(body)
        for at in range(0, len(body), _SLICE):
            await asyncio.sleep(0)
            await self.writable.wait()
            if self.lost or self.complete or self.error is not None:
                self.cut_short = True  # answered or gone first: the answer says which
                return
            transport.write(view[at : at + _SLICE])

    def take(self) -> bytes:
        data = b"".join(self.chunks)
        self.chunks.clear()
        self.buffered = 0
        if self.transport is not None and not self.lost:
            self.transport.resume_reading()
        return data

    @property
    def reusable(self) -> bool:
        return self.complete and not self.lost and self.keep_alive and not self.cut_short

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()
        self.lost = True


class _Response:
    __slots__ = ("_client", "_conn", "headers", "status")

    def __init__(self, conn: _Connection, client: H1Client) -> None:
        self._conn = conn
        self._client = client
        self.status = conn.status
        self.headers: Mapping[str, str] = conn.headers

    async def read(self) -> bytes:
        parts = [chunk async for chunk in self.chunks()]
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def whole(self) -> bytes | None:
        """The whole body if all of it has arrived (a small answer comes in the read that
        brought its head), taken at once and the connection released; None while more is due
        (then `chunks`). Spares a whole answer the body's async iteration and its wait."""
        conn = self._conn
        if not conn.complete:
            return None
        data = conn.take()
        self._client.release(conn)
        return data

    async def chunks(self) -> AsyncIterator[bytes]:
        conn = self._conn
        try:
            while True:
                if conn.chunks:
                    yield conn.take()
                    continue
                if conn.complete:
                    return
                if conn.error is not None:
                    raise conn.error
                await conn.wait()
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        self._client.release(self._conn)


class H1Client:
    """Implements `client.HttpClient` for `http://` upstreams."""

    def __init__(self, settings: UpstreamSettings) -> None:
        parts = urlsplit(settings.base_url)
        self._host = parts.hostname or "127.0.0.1"
        self._port = parts.port or 80
        # The Host header never carries `user:password@`: those travel as Basic credentials,
        # as httpx and aiohttp send them, unless the caller sets its own authorization.
        self._authority = parts.netloc.rpartition("@")[2].encode("latin-1")
        self._basic: bytes | None = None
        if "@" in parts.netloc:
            userinfo = unquote(parts.netloc.rpartition("@")[0])
            self._basic = b"authorization: Basic " + base64.b64encode(userinfo.encode())
        self._limit = settings.pool.max_connections
        self._keepalive = settings.pool.keepalive_seconds
        self._connect_timeout = settings.timeouts.connect
        self._idle: list[_Connection] = []
        self._open = 0
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._checked_out: set[_Connection] = set()
        # Connections closed for bytes no request asked for (a server out of step).
        self.unsolicited = 0

    async def request(
        self, method: str, url: str, *, body: bytes | None, headers: Mapping[str, str]
    ) -> _Response:
        path = urlsplit(url)
        target = (path.path or "/") + (f"?{path.query}" if path.query else "")
        content = body or b""
        head = self._encode(method, target, len(content), headers)
        small = len(content) <= _ONE_WRITE
        for attempt in (0, 1):
            # A pooled connection and a body that goes with its head (the usual request): no
            # coroutine of their own to wait on.
            conn = self._pooled() or await self._acquire()
            try:
                if small:
                    conn.send_now(head, content)
                else:
                    await conn.send(head, content)
                await conn.head
            except TransportFailed:
                self.release(conn)
                # A pooled connection the server had closed: nothing was answered, send again.
                if attempt == 0 and conn.reused and not conn.got_bytes:
                    continue
                raise
            except BaseException:
                conn.close()
                self.release(conn)
                raise
            return _Response(conn, self)
        raise AssertionError("unreachable")  # pragma: no cover

    def _encode(self, method: str, target: str, length: int, headers: Mapping[str, str]) -> bytes:
        """The request's head, up to and including the blank line."""
        lines = [f"{method} {target} HTTP/1.1".encode(), b"host: " + self._authority]
        lines += [f"{k}: {v}".encode("latin-1") for k, v in headers.items()]
        if self._basic is not None and not any(k.lower() == "authorization" for k in headers):
            lines.append(self._basic)
        lines.append(b"content-length: %d" % length)
        lines.append(b"\r\n")
        return b"\r\n".join(lines)

    def _pooled(self) -> _Connection | None:
        """The most recently pooled connection still good to use, checked out; None if none."""
        if not self._idle:
            return None
        now = time.monotonic()
        while self._idle:
            conn = self._idle.pop()
            if not conn.lost and now - conn.used_at < self._keepalive:
                conn.reused = True
                self._checked_out.add(conn)
                return conn
            conn.close()
            self._open -= 1
        return None

    async def _acquire(self) -> _Connection:
        pooled = self._pooled()
        if pooled is not None:
            return pooled
        while self._open >= self._limit:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
            if self._idle:
                return await self._acquire()
        self._open += 1
        try:
            async with asyncio.timeout(self._connect_timeout):
                _, conn = await asyncio.get_running_loop().create_connection(
                    partial(_Connection, self), self._host, self._port
                )
        except (OSError, TimeoutError) as exc:
            self._open -= 1
            self._wake()
            raise TransportFailed(str(exc) or f"cannot connect ({type(exc).__name__})") from exc
        except BaseException:
            self._open -= 1
            self._wake()
            raise
        self._checked_out.add(conn)
        return conn

    def release(self, conn: _Connection) -> None:
        if conn not in self._checked_out:
            return
        self._checked_out.discard(conn)
        if conn.reusable and not conn.chunks:
            conn.busy = False
            conn.used_at = time.monotonic()
            self._idle.append(conn)
        else:
            conn.close()
            self._open -= 1
        self._wake()

    def _wake(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    async def aclose(self) -> None:
        for conn in [*self._idle, *self._checked_out]:
            conn.close()
        self._idle.clear()
        self._checked_out.clear()
        self._open = 0
