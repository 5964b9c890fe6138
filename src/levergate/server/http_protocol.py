"""uvicorn's httptools protocol serving each request through levergate's own cycle
(server.http_cycle: no ASGI between the parser and the edge), with fewer, larger writes
(server.http_writes) and the limits a hostile client meets before any request reaches the app.

Limits (`config.ServerSettings`, each answered with OpenAI-shaped JSON and `connection: close`):
- The request head: at most `max_header_bytes` (URL and headers) and `max_headers` lines, else
  431. httptools keeps a header it has not finished in memory, so the bytes of a head still
  incomplete after a read are counted too: a 100 MB header is refused after 64 KiB and at most
  one more read, not held whole.
- Time: a head must arrive in whole within `head_timeout_seconds` of its first byte (or of the
  connection being opened), else 408; a silent new connection is closed. A body must bring
  `body_min_bytes_per_second` in every `body_timeout_seconds` window, else 408. Between
  requests uvicorn's keep-alive timeout closes an idle connection (checked by one timer a
  connection, re-armed when it fires, not one made and cancelled a request).
- After any of these answers the connection is half-closed and what the client still sends is
  read and dropped for up to `error_linger_seconds`, then closed: closing with the request
  unread resets the connection, which can destroy the answer before the client reads it. The
  same holds for an answer of the app's that ends the connection while the request's body is
  still arriving (a guard's 401 on an upload: the client saw a reset, not the 401).
- Connections: one opened while `limits.max_connections` are open first closes a connection
  that has never sent a byte (server.peers: over its peer's limit first, else the oldest
  silent for `shed_idle_after_seconds`) and takes its place; if there is none it is answered
  503 once its head has arrived (not at once: closing a socket with the request unread can
  reset it before the client reads the answer). A connection beyond its peer address's
  `max_connections_per_peer` is answered 503 the same way. Refusals are logged once per
  `overload_log_seconds`.

A request that cannot be parsed gets a 400, but only after the answers still owed on the
connection: a valid request pipelined before garbage is answered first.

A request that arrives in one read (the usual case) costs no timer, since the timers are armed
only when a head or body is still incomplete after a read, and no measuring of its head, since
a head is only measured when the reads it came in are over the limit.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import httptools
import orjson
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from levergate.errors import (
    BadRequest,
    HeadersTooLarge,
    LevergateError,
    Overloaded,
    RequestTimeout,
    error_payload,
)
from levergate.server.http_cycle import Connection, Cycle
from levergate.server.http_writes import Coalescing
from levergate.server.peers import Peers

if TYPE_CHECKING:
    from levergate.server.asgi import App

log = logging.getLogger("levergate.server")


@dataclass(slots=True)
class Overload:
    """Connections refused over the cap, shared by a server's connections: logged at most once
    per `every` seconds, with the count since the last line."""

    every: float
    what: str = "connection cap of %d reached"
    setting: str = "server.max_connections"
    refused: int = 0
    next_log: float = 0.0

    def refuse(self, *, now: float, cap: int) -> None:
        self.refused += 1
        if now >= self.next_log:
            log.warning(
                "%s: %d connection(s) answered 503 since the last warning (%s)",
                self.what % cap,
                self.refused,
                self.setting,
            )
            self.refused = 0
            self.next_log = now + self.every


class Targets:
    """Request targets (the URL bytes of a request line) already parsed into (path, query):
    `httptools.parse_url`, the URL's decoding and its percent-decoding are a function of the
    bytes, ~3,600 instructions a request (callgrind), where a dict look-up is ~400, and a
    client sends the same few targets again and again. At most `MOST` targets of at most
    `LONGEST` bytes each are kept; once full, it starts over (a client sending distinct
    targets costs an insert each, never memory). Only a target that parsed is kept: one that
    does not fails the same way every time."""

    __slots__ = ("known",)
    MOST = 256
    LONGEST = 1024

    def __init__(self) -> None:
        self.known: dict[bytes, tuple[str, str]] = {}

    def parse(self, target: bytes) -> tuple[str, str]:
        url = httptools.parse_url(target)
        path = url.path.decode("ascii")
        if "%" in path:
            path = unquote(path)
        query = url.query
        parsed = path, query.decode("latin-1") if query else ""
        if len(target) <= self.LONGEST:
            known = self.known
            if len(known) >= self.MOST:
                known.clear()
            known[target] = parsed
        return parsed


@dataclass(frozen=True, slots=True)
class Limits:
    """One server's client limits (from `config.ServerSettings`; the cap fitted to the descriptor
    limit by server.run.connection_cap)."""

    header_bytes: int
    headers: int
    head_timeout: float
    body_timeout: float
    body_min_rate: int
    keep_alive_timeout: float
    linger: float
    max_connections: int
    overload: Overload = field(compare=False)
    peers: Peers = field(compare=False)
    peer_overload: Overload = field(compare=False)
    # Not a limit: the targets the server's connections have parsed (shared by them).
    targets: Targets = field(compare=False, default_factory=Targets)


class HttpProtocol(HttpToolsProtocol):
    """One client connection. uvicorn's parsing, connection and keep-alive handling; each
    request goes to the app as a `server.http_cycle.Cycle` (`App.serve`), not through ASGI.
    State beyond uvicorn's: the request being answered (`_cycle`) and those pipelined behind it
    (`_queued`), which part of a request the parser is in (`_in_head`, `_in_body`), the bytes
    the head came in, one timer for the current phase, and an error answer waiting for the
    responses still owed (`_refusal`)."""

    def __init__(
        self,
        config: Any,
        server_state: Any,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
        *,
        limits: Limits,
        app: App,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.limits = limits
        self.served = app
        self._cycle: Cycle | None = None
        self._queued: deque[Cycle] = deque()
        self.timeout_keep_alive = limits.keep_alive_timeout  # type: ignore[assignment]
        self._timer: asyncio.TimerHandle | None = None
        # The keep-alive wait: since when the connection has been idle (None while a request
        # is read or answered). One timer a connection checks it, re-armed only when it fires
        # (`_keep_alive_due`), not a timer made and cancelled for every request.
        self._idle_since: float | None = None
        self._in_head = self._in_body = self._head_fresh = False
        self._over_cap = self._refused = self._over_peer = self._silent = False
        self._peer = ""
        # Bytes of the reads a head came in: those wholly inside it (a lower bound of its size,
        # `_head_raw`) and all of them but the current one (`_head_upper`, with `_reading` an
        # upper bound).
        self._head_raw = self._head_upper = self._reading = self._body_bytes = 0
        self._refusal: LevergateError | None = None
        # The connection's own task (`_serve_in_turn`: its requests one after another, created
        # with the first), the future it waits on for the next request while idle, and whether
        # the connection is gone (the task then ends instead of waiting).
        self._server: asyncio.Task[None] | None = None
        self._next: asyncio.Future[Cycle | None] | None = None
        self._lost = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._writes = Coalescing(transport, close=lambda: self._close(transport))
        super().connection_made(self._writes)  # type: ignore[arg-type]
        self._connection = Connection(self._writes, self.flow, self.on_response_complete,
                                      self.client, self.tasks, self.loop)  # fmt: skip
        limits = self.limits
        peer = transport.get_extra_info("peername")
        self._peer = str(peer[0]) if isinstance(peer, tuple) and peer else ""
        self._over_peer = limits.peers.opened(self, peer=self._peer, now=self.loop.time())
        self._silent = True
        self._over_cap = len(self.connections) > limits.max_connections
        self._timer = self.loop.call_later(limits.head_timeout, self._head_timed_out)

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timer()
        self._lost = True
        waiting = self._next
        if waiting is not None:  # the connection's task waits for a request: none will come
            self._next = None
            waiting.set_result(None)
        if self.timeout_keep_alive_task is not None:
            self.timeout_keep_alive_task.cancel()
            self.timeout_keep_alive_task = None
        self.limits.peers.closed(self, peer=self._peer)
        self.connections.discard(self)
        cycle = self._cycle
        if cycle is not None and not cycle.response_complete:
            cycle.lose()
        if self.flow is not None:
            self.flow.resume_writing()
        if exc is None:
            self.transport.close()
            self._unset_keepalive_if_required()
        self.parser = None  # type: ignore[assignment]

    def shutdown(self) -> None:
        """The server is stopping: close now, or after the answer being written."""
        cycle = self._cycle
        if cycle is None or cycle.response_complete:
            self.transport.close()
        else:
            cycle.keep_alive = False

    def shed(self) -> None:
        """Closed to make room at the cap (server.peers): it has sent nothing, owes nothing."""
        self.limits.peers.spoke(self)  # no longer a candidate to shed
        self._cancel_timer()
        self.transport.close()

    def data_received(self, data: bytes) -> None:
        if self._silent:
            self._spoke()
        if self._refused:
            return  # the parser has failed or an answer is decided: the rest is not read
        self._reading = len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:
            cause = exc.__context__
            self._refuse(cause if isinstance(cause, LevergateError) else _invalid())
            return
        except httptools.HttpParserError:
            self._refuse(_invalid())
            return
        except httptools.HttpParserUpgrade:
            self._unsupported_upgrade_warning()
        if self._in_head:
            self._head_read(len(data))
        elif self._in_body:
            self._body_read(len(data))

    # Parser callbacks
    def on_message_begin(self) -> None:
        self.url = b""
        self.expect_100_continue = False
        self.headers = []
        # The keep-alive wait ends with a request, not with any byte (stray CRLFs keep nothing).
        self._idle_since = None
        self._in_head = self._head_fresh = True
        self._head_raw = self._head_upper = 0

    def on_headers_complete(self) -> None:
        self._in_head = False
        limits = self.limits
        if len(self.headers) > limits.headers:
            raise self._too_large()
        # The reads this head came in bound its size; only when they are over the limit is it
        # measured (the head's bytes less the spaces and colons, so never more than them).
        if self._head_upper + self._reading > limits.header_bytes:
            size = len(self.url) + sum(len(n) + len(v) + 4 for n, v in self.headers)
            if size > limits.header_bytes:
                raise self._too_large()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._over_cap and len(self.connections) > limits.max_connections:
            limits.overload.refuse(now=self.loop.time(), cap=limits.max_connections)
            raise Overloaded(
                "The gateway has too many open connections; try again shortly.",
                code="too_many_connections",
                retry_after=1,
            )
        if self._over_peer and limits.peers.over(self._peer):
            most = limits.peers.per_peer
            limits.peer_overload.refuse(now=self.loop.time(), cap=most)
            raise Overloaded(
                f"Your address has more than {most} connections open to the gateway; close "
                "some or try again shortly.",
                code="too_many_connections_from_peer",
                retry_after=1,
            )
        parser = self.parser
        version = parser.get_http_version()
        targets = limits.targets
        target = targets.known.get(self.url)  # the usual: a target met before
        path, query = target if target is not None else targets.parse(self.url)
        # Names are lower-cased already (uvicorn's on_header). A loop, not a comprehension:
        # on CPython 3.11 that is a function made and called a request.
        headers: dict[str, str] = {}
        for name, value in self.headers:
            headers[name.decode("latin-1")] = value.decode("latin-1")
        cycle = Cycle(self._connection, parser.get_method().decode("ascii"), path, query, headers)
        if version != "1.1":
            cycle.unchunked = version == "1.0"
            cycle.keep_alive = not cycle.unchunked and parser.should_keep_alive()
        elif not parser.should_keep_alive():
            cycle.keep_alive = False
        if self.expect_100_continue:
            cycle.waiting_for_100_continue = True
        self._in_body = True
        previous = self._cycle
        self._cycle = cycle
        if previous is None or previous.response_complete:
            self._start(cycle)
        else:  # pipelined: answered in order, and nothing more is read until then
            self.flow.pause_reading()
            self._queued.appendleft(cycle)

    def on_body(self, body: bytes) -> None:
        if self._cycle is not None:
            self._cycle.received(body)

    def on_message_complete(self) -> None:
        if self._cycle is not None:
            self._cycle.ended_body()
        self._in_body = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _start(self, cycle: Cycle) -> None:
        # The task leaves the server's set itself, as `App.serve` ends (the graceful shutdown
        # waits for the set to empty), not by a done callback: that was one more callback
        # scheduled and run a request. A task cancelled before it ever ran (uvicorn's, once
        # the graceful shutdown's time is over, when nothing waits for the set any more) stays.
        waiting = self._next
        task = self._server
        if waiting is not None and task is not None:  # the connection's task is idle: its turn
            self._next = None
            waiting.set_result(cycle)
        elif task is None:
            task = self._server = self.loop.create_task(self._serve_in_turn(cycle))
        else:  # it is still ending the last answer (closing a stream): a task of its own
            task = self.loop.create_task(self.served.serve(cycle))
        cycle.handler = task
        self.tasks.add(task)

    async def _serve_in_turn(self, cycle: Cycle | None) -> None:
        """Serve this connection's requests one after another in one task, made with the first:
        a task a request cost ~9k instructions (callgrind: `Task.__init__` registers it in
        asyncio's WeakSet of all tasks, a Python call, and its end removes it through the
        weak reference's callback, another), where waking this one is a future's result.

        Each request still begins as in a task of its own: the task goes on to the next only
        if the request left it as it found it, with no cancellation requested (`cancelling`:
        one asked of this request and not taken back by it, or one still pending) and its
        context unchanged (no context variable set by the request outlives it). Otherwise, or
        once the connection is gone, it ends, and the next request gets a task of its own
        again. A cancellation (`Cycle.lose`, `Cycle.end`, uvicorn's at the end of a shutdown)
        is only asked of a request not yet over, so it reaches that request's awaits, never
        the wait between requests; the task is in the server's set only while a request runs."""
        task = asyncio.current_task()
        assert task is not None  # noqa: S101 - run by `create_task`
        # Bound once: the check and the wait are the loop's whole cost a request. The wait's
        # future is made on the running loop (this one) without naming it: ~900 instructions,
        # where `loop.create_future()` (uvloop passes the loop by keyword) is ~2,100.
        cancelling, context, new_future = task.cancelling, contextvars.copy_context, asyncio.Future
        fresh = context()
        serve = self.served.serve
        try:
            while cycle is not None:
                await serve(cycle)
                if self._lost or cancelling() or context() != fresh:
                    return
                waiting: asyncio.Future[Cycle | None] = new_future()
                self._next = waiting
                cycle = await waiting
        finally:
            self._server = self._next = None

    def on_response_complete(self) -> None:
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        if self.flow.read_paused:  # `resume_reading` does nothing else
            self.flow.resume_reading()
        if self._queued:
            self._idle_since = None
            self._start(self._queued.pop())
        else:
            self._idle_since = self.loop.time()
            if self.timeout_keep_alive_task is None:
                self.timeout_keep_alive_task = self.loop.call_later(
                    self.timeout_keep_alive, self._keep_alive_due
                )
        if self._refusal is not None:
            if self._cycle is not None and self._cycle.response_complete:
                refusal, self._refusal = self._refusal, None
                self._unset_keepalive_if_required()
                self._answer(refusal)
        elif self._in_head:
            # The next head began arriving while this answer was written: its clock, not the
            # keep-alive one, now runs.
            self._unset_keepalive_if_required()
            if self._timer is None:
                self._timer = self.loop.call_later(self.limits.head_timeout, self._head_timed_out)

    def _unset_keepalive_if_required(self) -> None:
        """uvicorn's name: the keep-alive wait is over (its timer, if any, finds it so)."""
        self._idle_since = None

    def _keep_alive_due(self) -> None:
        self.timeout_keep_alive_task = None
        since = self._idle_since
        if since is None:
            return  # busy: armed again when its answer is complete
        left = since + self.timeout_keep_alive - self.loop.time()
        if left > 0:
            self.timeout_keep_alive_task = self.loop.call_later(left, self._keep_alive_due)
        else:
            self.timeout_keep_alive_handler()

    # Limits
    def _spoke(self) -> None:
        """The first bytes of this connection: a client at work. Over the cap, it takes the
        place of a connection that has sent nothing (server.peers), if there is one."""
        self._silent = False
        peers = self.limits.peers
        peers.spoke(self)
        if self._over_cap and peers.shed(now=self.loop.time(), keep=self):
            self._over_cap = False

    def _head_read(self, size: int) -> None:
        self._head_upper += size
        if self._head_fresh:  # the head began in this read, after bytes of the last request
            self._head_fresh = False
        else:
            self._head_raw += size
            if self._head_raw > self.limits.header_bytes:
                self._refuse(self._too_large())
                return
        if self._timer is None:
            self._timer = self.loop.call_later(self.limits.head_timeout, self._head_timed_out)

    def _head_timed_out(self) -> None:
        self._timer = None
        if self.transport.is_closing():
            return
        if self._cycle is not None and not self._cycle.response_complete:
            # An answer is still being written; a pipelined head's time starts after it.
            self._timer = self.loop.call_later(self.limits.head_timeout, self._head_timed_out)
        elif self._in_head:
            seconds = self.limits.head_timeout
            self._refuse(
                RequestTimeout(
                    f"The request head did not arrive within {seconds} s.", code="request_timeout"
                )
            )
        else:
            self.transport.close()  # opened and never used

    def _body_read(self, size: int) -> None:
        self._body_bytes += size
        if self._timer is None:
            self._body_bytes = 0
            self._timer = self.loop.call_later(self.limits.body_timeout, self._body_window_over)

    def _body_window_over(self) -> None:
        self._timer = None
        if not self._in_body or self.transport.is_closing():
            return
        window = self.limits.body_timeout
        needed = max(1, int(self.limits.body_min_rate * window))
        if self._body_bytes >= needed or self.flow.read_paused:
            self._body_bytes = 0
            self._timer = self.loop.call_later(window, self._body_window_over)
            return
        self._refuse(
            RequestTimeout(
                f"The request body brought under {needed} bytes in {window} s "
                f"(the minimum is {self.limits.body_min_rate} bytes per second).",
                code="request_timeout",
            )
        )

    def _too_large(self) -> HeadersTooLarge:
        limits = self.limits
        return HeadersTooLarge(
            f"The request head is over {limits.header_bytes} bytes or {limits.headers} headers.",
            code="request_header_fields_too_large",
        )

    def _refuse(self, error: LevergateError) -> None:
        """Answer `error` and close, once the answers still owed on this connection are out."""
        in_body = self._in_body
        self._refused = True
        self._in_head = self._in_body = False
        self._cancel_timer()
        cycle = self._cycle
        if in_body and cycle is not None:
            # The request being read failed: its app hears a disconnect, and nothing it sends
            # is written. Answered unless an answer has begun or others are owed (then closed).
            cycle.lose()
            if cycle.response_started or self._queued:
                self.transport.close()
            else:
                self._answer(error)
        elif cycle is not None and not cycle.response_complete:
            self._refusal = error
        else:
            self._unset_keepalive_if_required()
            self._answer(error)

    def _answer(self, error: LevergateError) -> None:
        if self.transport.is_closing():
            return
        status, payload, extra = error_payload(error)
        body = orjson.dumps(payload)
        head = [STATUS_LINE[status], b"content-type: application/json\r\n"]
        head += [b"%s: %s\r\n" % (k.encode(), v.encode()) for k, v in extra.items()]
        head.append(b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body))
        self.transport.write(b"".join(head) + body)
        # Closing with the client's bytes unread would reset the connection, and a reset can
        # destroy the answer before the client reads it: half-close, drop what still comes.
        self._cancel_timer()
        if self.transport.can_write_eof():
            self.transport.write_eof()
            self._timer = self.loop.call_later(self.limits.linger, self.transport.close)
        else:  # TLS has no half-close
            self.transport.close()

    def _close(self, transport: asyncio.Transport) -> None:
        """End the connection; while the request's body is still arriving, half-close first and
        drop what still comes for up to `linger` seconds (as after the limits' own answers)."""
        if not self._in_body or not transport.can_write_eof() or transport.is_closing():
            transport.close()
            return
        self._refused = True
        self._in_body = False
        self._cancel_timer()
        transport.write_eof()
        self._timer = self.loop.call_later(self.limits.linger, transport.close)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


def _invalid() -> BadRequest:
    return BadRequest("Invalid HTTP request received.", code="invalid_http_request")
