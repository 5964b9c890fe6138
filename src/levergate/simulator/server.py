"""The simulator's HTTP/1.1 server: a raw `asyncio.Protocol` with httptools' parser.

Chosen by measurement (`benchmarks/sim_throughput.py`, results in `benchmarks/results/`):
answering from the parser callback, without an ASGI layer, a task or a queue per request, costs
about half the CPU per request of uvicorn with a bare ASGI app, and less than granian's RSGI
(about 75-85 us against 100-190 us on the 2-core test box), so one process serves roughly
12,000 small completions per second per core it gets. It also makes the faults real on the
socket: a hang writes nothing, a disconnect closes the TCP connection inside a chunked or
Content-Length body.

Per connection, requests are answered strictly in order (pipelining-safe): a reply that must
wait (latency, a stream, a hang) is executed by one task owned by the connection, and requests
parsed meanwhile queue behind it. The task is cancelled when the client goes away, and
`SimServer.close` closes every connection and awaits every task, so nothing outlives the server.
"""

from __future__ import annotations

import asyncio
import collections
import logging

import httptools

from levergate.simulator.isolation import Isolation
from levergate.simulator.responses import Reply, SimError
from levergate.simulator.simulator import RELEVANT_HEADERS, Simulator
from levergate.simulator.wire import chunk, head

_log = logging.getLogger(__name__)
_WANTED = frozenset(name.encode() for name in RELEVANT_HEADERS)
# Header names of these lengths may matter (the wanted ones and `expect`); checking the length
# first skips lower-casing the common headers (host, content-type, content-length, ...).
_LENGTHS = frozenset(len(name) for name in (*_WANTED, b"expect"))
_METHODS = {m.encode(): m for m in ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")}
_MAX_QUEUE = 64  # pipelined requests parsed ahead of the one being answered


class _Connection(asyncio.Protocol):
    def __init__(self, sim: Simulator, server: SimServer) -> None:
        self._sim = sim
        self._server = server
        self._parser = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None
        self._url = b""
        self._headers: dict[str, str] = {}
        self._body: bytes | bytearray = b""
        # A reply, or one being prepared in a worker process (isolation.py).
        self._queue: collections.deque[tuple[Reply | asyncio.Future[Reply], bool]] = (
            collections.deque()
        )
        self._task: asyncio.Task[None] | None = None
        self._writable: asyncio.Future[None] | None = None
        self._closed = False
        self._refusal: SimError | None = None

    # -- asyncio.Protocol -------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # a stream server's transport
        self._server.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:  # noqa: ARG002 - either way it is gone
        self._closed = True
        self._server.connections.discard(self)
        if self._task is not None:
            self._task.cancel()
        # The task may be cancelled before it ever ran, so the slots are released here too
        # (`finish` is idempotent).
        for item, _ in self._queue:
            self._forget(item)
        self._queue.clear()
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)

    def _forget(self, item: Reply | asyncio.Future[Reply]) -> None:
        """Release what an unanswered request holds (a reply being prepared is cancelled, or
        released once prepared)."""
        if isinstance(item, Reply):
            self._sim.finish(item)
        elif not item.done():
            item.cancel()
        elif not item.cancelled() and item.exception() is None:
            self._sim.finish(item.result())

    def pause_writing(self) -> None:
        self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)
        self._writable = None

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._reject(400, "Protocol upgrades are not supported by the simulator.")
        except httptools.HttpParserError as exc:
            # A callback that refuses the request (see on_body) surfaces here as a parser error.
            refusal, self._refusal = self._refusal, None
            if refusal is not None:
                self.close_after(refusal.reply())
            else:
                self._reject(400, f"Malformed HTTP request: {exc}.")

    # -- httptools callbacks ----------------------------------------------------------------
    def on_message_begin(self) -> None:
        self._url = b""
        self._headers = {}
        self._body = b""

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        if len(name) not in _LENGTHS:
            return
        name = name.lower()
        if name in _WANTED:
            self._headers[name.decode()] = value.decode("latin-1")
        elif name == b"expect" and value.lower() == b"100-continue" and self._transport:
            self._transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, body: bytes) -> None:
        # Bodies mostly arrive in one piece, kept as it is; a large one comes in many, gathered
        # in a bytearray (concatenating bytes copied the whole body again per piece: a 32 MB
        # body in 64 KiB pieces cost the simulator's loop seconds).
        if not self._body:
            self._body = body
        elif isinstance(self._body, bytes):
            self._body = bytearray(self._body) + body
        else:
            self._body += body
        if len(self._body) > self._sim.settings.max_body_bytes:
            self._refusal = SimError(413, "The request body is too large for the simulator.")
            raise self._refusal

    def on_message_complete(self) -> None:
        if self._closed:
            return  # pipelined after a `connection: close` request: never answered
        name = self._parser.get_method()
        method = _METHODS.get(name) or name.decode("latin-1")
        path = self._url.decode("latin-1")
        keep_alive = bool(self._parser.should_keep_alive())
        sim = self._sim
        kind = self._server.isolation.wanted(sim.settings, method=method, path=path,
                                             size=len(self._body))  # fmt: skip
        if kind is not None:
            work = self._isolated(kind, path, dict(self._headers), self._body)
            self._enqueue(asyncio.ensure_future(work), keep_alive)
            return
        reply = sim.handle(method=method, path=path, headers=self._headers,
                           body=bytes(self._body))  # fmt: skip
        if (
            self._task is None
            and reply.delay <= 0
            and not reply.hang
            and reply.event_delays is None
        ):
            self._write_now(reply, keep_alive=keep_alive)
            return
        self._enqueue(reply, keep_alive)

    async def _isolated(self, kind: str, path: str, headers: dict[str, str],
                        body: bytes | bytearray) -> Reply:  # fmt: skip
        """A large request prepared in a worker process (isolation.py), then answered here."""
        sim = self._sim
        try:
            parsed = await self._server.isolation.prepare(kind, headers, body, sim.settings)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a worker that died, or a bug in it: its 500, logged
            return sim.handle_parsed(path, exc)
        return sim.handle_parsed(path, parsed)

    def _enqueue(self, item: Reply | asyncio.Future[Reply], keep_alive: bool) -> None:
        self._queue.append((item, keep_alive))
        if len(self._queue) >= _MAX_QUEUE and self._transport is not None:
            self._transport.pause_reading()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._drain())
            self._server.tasks.add(self._task)
            self._task.add_done_callback(self._server.tasks.discard)

    # -- writing ----------------------------------------------------------------------------
    def _reject(self, status: int, message: str) -> None:
        self.close_after(SimError(status, message).reply())

    def close_after(self, reply: Reply) -> None:
        """Answer a request that broke the connection's framing, then close."""
        if self._transport is not None and not self._closed and self._task is None:
            self._transport.write(
                head(reply, length=len(reply.body), keep_alive=False) + reply.body
            )
        self.close()

    def close(self) -> None:
        if self._transport is not None and not self._closed:
            self._closed = True
            self._transport.close()

    def _write_now(self, reply: Reply, *, keep_alive: bool) -> None:
        transport = self._transport
        if transport is None:  # pragma: no cover - replies only exist on a made connection
            return
        try:
            if reply.events is None:
                body = reply.body
                if reply.cut_after is None:  # the common case first
                    transport.write(head(reply, length=len(body), keep_alive=keep_alive) + body)
                else:
                    transport.write(
                        head(reply, length=len(body), keep_alive=keep_alive)
                        + body[: reply.cut_after]
                    )
                    keep_alive = False
            else:
                events = (
                    reply.events if reply.cut_after is None else reply.events[: reply.cut_after]
                )
                parts = [head(reply, length=None, keep_alive=keep_alive), *map(chunk, events)]
                if reply.cut_after is None:
                    parts.append(b"0\r\n\r\n")
                else:
                    keep_alive = False
                transport.write(b"".join(parts))
        finally:
            self._sim.finish(reply)
        if not keep_alive:
            self.close()

    async def _drain(self) -> None:
        """Answer queued requests in order; owned by this connection, cancelled with it."""
        try:
            while self._queue and not self._closed:
                item, keep_alive = self._queue[0]
                reply = item if isinstance(item, Reply) else await item
                try:
                    await self._execute(reply, keep_alive=keep_alive)
                finally:
                    self._sim.finish(reply)
                if self._queue:
                    self._queue.popleft()
                if self._transport is not None and not self._closed:
                    self._transport.resume_reading()
        except asyncio.CancelledError:
            raise
        except Exception:  # the process edge: a bug drops this connection, never the server
            _log.exception("simulator connection failed")
            if self._transport is not None:
                self._transport.abort()
        finally:
            self._task = None

    async def _execute(self, reply: Reply, *, keep_alive: bool) -> None:
        clock = self._sim.clock
        if reply.hang:
            await asyncio.get_running_loop().create_future()  # until cancelled by the client
        if reply.delay > 0:
            await clock.sleep(reply.delay)
        if self._closed:
            return
        if reply.events is None or reply.event_delays is None:
            self._write_now(reply, keep_alive=keep_alive)
            return
        await self._stream(reply, keep_alive=keep_alive)

    async def _stream(self, reply: Reply, *, keep_alive: bool) -> None:
        """Paced SSE: each event after its delay, on an absolute schedule so pauses for
        back-pressure or timer slack do not accumulate into drift."""
        transport = self._transport
        if transport is None or reply.events is None or reply.event_delays is None:
            return  # pragma: no cover - `_execute` only streams paced replies on a connection
        clock = self._sim.clock
        transport.write(head(reply, length=None, keep_alive=keep_alive))
        due = clock.now()
        for index, (event, delay) in enumerate(zip(reply.events, reply.event_delays, strict=True)):
            if index == reply.cut_after:
                self.close()
                return
            if delay > 0:
                due += delay
                await clock.sleep(due - clock.now())
            if self._closed:
                return
            transport.write(chunk(event))
            if self._writable is not None:
                await self._writable
        if reply.cut_after is not None:
            self.close()
            return
        transport.write(b"0\r\n\r\n")
        if not keep_alive:
            self.close()


class SimServer:
    """Listening sockets plus the connections and tasks they own."""

    def __init__(self, sim: Simulator) -> None:
        self.sim = sim
        self.connections: set[_Connection] = set()
        self.tasks: set[asyncio.Task[None]] = set()
        self.isolation = Isolation()
        self._server: asyncio.Server | None = None

    async def start(
        self, *, host: str, port: int, reuse_port: bool = False, backlog: int = 2048
    ) -> int:
        """Listen and return the bound port (useful with port 0)."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _Connection(self.sim, self),
            host=host,
            port=port,
            reuse_port=reuse_port or None,
            backlog=backlog,
        )
        port_bound: int = self._server.sockets[0].getsockname()[1]
        isolation = self.sim.settings.isolation
        if isolation.prestart and isolation.min_bytes is not None:
            await self.isolation.start(self.sim.settings)
        return port_bound

    async def close(self) -> None:
        """Stop listening, close every connection, and wait for their tasks to end."""
        if self._server is not None:
            self._server.close()
        for connection in list(self.connections):
            connection.close()
        for task in list(self.tasks):
            task.cancel()
        if self.tasks:
            await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.isolation.close()
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
