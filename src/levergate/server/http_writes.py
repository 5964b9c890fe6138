"""The transports under uvicorn's writes (server.http_protocol puts them in place): a response's
head goes out with its first body bytes, and a stream's later chunks are gathered into one write
per loop turn; two per-request exceptions to that, for a HEAD and for an HTTP/1.0 client.

uvicorn writes the status line and headers as soon as the app sends `http.response.start`, then
each body message in a write of its own: a syscall, a segment and possibly a wake-up of the
client each. Two changes, both measured:

- The head is held until the first body message and sent with it. It costs the client nothing
  here (the ASGI app sends the two back to back; a stream is answered at its first generated
  token, see `server.handlers.openai`), so a whole answer is one write. On cache hits under wrk
  at 64 connections, alternating builds: 67 vs 70.5 us of gateway CPU per request.
- Body writes after that are collected until the end of the current turn of the event loop and
  sent as one. An upstream that sends several events in one read (a fast model, a replayed
  cached stream) costs one write instead of one per event; events that arrive one by one still
  leave in the turn they arrived in. Per-event writes were over a quarter of the gateway's CPU
  on streams (py-spy, 16 streams of 16 tokens). Alternating builds, 16-token streams from the
  simulator: 0.22-0.24 vs 0.31-0.32 ms of gateway CPU per stream, 3,630-4,371 vs 3,057-3,208
  streams/s at 16 and 64 connections; TTFT added at 50 ms upstream latency 0.54-0.63 vs
  0.67-0.68 ms at the socket and 0.62-0.84 vs 1.07-1.23 ms through `levergate bench`.

The head is recognised by shape, since it is the only write uvicorn makes that is a whole
response head and nothing more: it starts with a status line and ends with the blank line.
Interim `1xx` heads (`100 Continue`) are never held. Anything held or collected is written
before a later write and before the transport closes, so nothing is lost or reordered.

A head with no body to come leaves at once: a `204`, `304` or `content-length: 0` answer (and an
ASGI `more_body=False` with an empty body) is followed at once by uvicorn's empty body write,
which releases the head; a HEAD answer has no body write at all, so its cycle writes through
`HeadOnly` instead (a held HEAD answer used to wait forever: `curl -I` hung). `Unchunked` serves
an HTTP/1.0 client, which knows no chunked encoding: the stream's bytes are sent bare and the
end of the connection (uvicorn closes it after a 1.0 answer) ends the body.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

# Above this a body is written after the head rather than copied behind it.
_JOIN_AT_MOST = 64 * 1024


class Coalescing:
    """A transport that holds a response head until the body's first write, and gathers the
    writes after that into one per turn of the event loop."""

    __slots__ = ("_close", "_held", "_loop", "_pending", "_transport")

    def __init__(
        self, transport: asyncio.Transport, *, close: Callable[[], None] | None = None
    ) -> None:
        self._transport = transport
        # How the connection ends once everything is written (the protocol's: it may linger).
        self._close = close if close is not None else transport.close
        self._loop = asyncio.get_running_loop()
        self._held: bytes | None = None
        self._pending: list[bytes] = []

    def write(self, data: bytes) -> None:
        held = self._held
        if held is not None:
            self._held = None
            self._flush()
            if len(data) <= _JOIN_AT_MOST:
                self._transport.write(held + data)
            else:
                self._transport.write(held)
                self._transport.write(data)
        elif data[:9] == b"HTTP/1.1 " and data[9:10] != b"1" and data[-4:] == b"\r\n\r\n":
            self._held = data
        elif len(data) > _JOIN_AT_MOST:
            # A large chunk (a large answer sent in chunks) goes at once, after what is
            # collected: gathered, every chunk of the body would be joined into one write, and
            # the flow control that waits for a slow reader would never see the buffer fill.
            self._flush()
            if not self._transport.is_closing():
                self._transport.write(data)
        else:
            if not self._pending:
                self._loop.call_soon(self._flush)
            self._pending.append(data)

    def write_now(self, data: bytes) -> None:
        """Write `data` at once, after anything held or collected: a head with no body."""
        self._flush_all()
        if not self._transport.is_closing():
            self._transport.write(data)

    def close(self) -> None:
        self._flush_all()
        self._close()

    def write_eof(self) -> None:
        self._flush_all()
        self._transport.write_eof()

    def _flush(self) -> None:
        if self._pending:
            pending, self._pending = self._pending, []
            if not self._transport.is_closing():
                self._transport.write(b"".join(pending))

    def _flush_all(self) -> None:
        self._flush()
        if self._held is not None:
            held, self._held = self._held, None
            if not self._transport.is_closing():
                self._transport.write(held)

    # The rest of the transport's surface is the real transport's.
    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def pause_reading(self) -> None:
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._transport.resume_reading()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


_CHUNKED = b"transfer-encoding: chunked\r\n"


class HeadOnly:
    """The transport of a HEAD request's cycle: every write it makes is a whole head (uvicorn
    writes no body for HEAD), so none is held."""

    __slots__ = ("_writes",)

    def __init__(self, writes: Coalescing) -> None:
        self._writes = writes

    def write(self, data: bytes) -> None:
        self._writes.write_now(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._writes, name)


class Unchunked:
    """The transport of an HTTP/1.0 request's cycle. uvicorn frames a body without a length as
    chunks, one write per body message (`size CRLF data CRLF`, then `0 CRLF CRLF` at the end);
    this drops the framing and the `transfer-encoding` header, and the connection's close (a
    1.0 connection is never kept alive) marks the end of the body."""

    __slots__ = ("_chunked", "_writes")

    def __init__(self, writes: Coalescing) -> None:
        self._writes = writes
        self._chunked: bool | None = None  # None until the head is written

    def write(self, data: bytes) -> None:
        if self._chunked is None:
            if data[9:10] != b"1":  # a final head, not `100 Continue`
                self._chunked = _CHUNKED in data
                if self._chunked:
                    data = data.replace(_CHUNKED, b"", 1)
        elif self._chunked:
            data = unframe(data)
        self._writes.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._writes, name)


def unframe(data: bytes) -> bytes:
    """The payload of one of uvicorn's chunked writes: `size CRLF data CRLF`, that followed by
    the last chunk, the last chunk alone (size 0 is only ever the last chunk), or nothing (an
    empty message before the last)."""
    if not data:
        return data
    end = data.index(b"\r\n")
    size = int(data[:end], 16)
    return data[end + 2 : end + 2 + size]
