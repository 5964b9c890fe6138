"""The transport under a connection's writes (server.http_protocol puts it in place): a
stream's chunks are gathered into one write per turn of the event loop.

Written one by one, each chunk is a syscall, a segment and possibly a wake-up of the client.
Two changes, both measured (they began as changes to uvicorn's writes; `server.http_cycle` now
writes the answers itself and keeps both):

- A response's head leaves with its first body bytes, so a whole answer is one write. It costs
  the client nothing here (a stream is answered at its first generated token, see
  `server.handlers.openai`). On cache hits under wrk at 64 connections, alternating builds: 67
  vs 70.5 us of gateway CPU per request.
- Body writes after that are collected until the end of the current turn of the event loop and
  sent as one. An upstream that sends several events in one read (a fast model, a replayed
  cached stream) costs one write instead of one per event; events that arrive one by one still
  leave in the turn they arrived in. Per-event writes were over a quarter of the gateway's CPU
  on streams (py-spy, 16 streams of 16 tokens). Alternating builds, 16-token streams from the
  simulator: 0.22-0.24 vs 0.31-0.32 ms of gateway CPU per stream, 3,630-4,371 vs 3,057-3,208
  streams/s at 16 and 64 connections; TTFT added at 50 ms upstream latency 0.54-0.63 vs
  0.67-0.68 ms at the socket and 0.62-0.84 vs 1.07-1.23 ms through `levergate bench`.

Anything collected is written before a later write and before the transport closes, so nothing
is lost or reordered.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

# Above this a body is written after the head rather than copied behind it.
JOIN_AT_MOST = 64 * 1024


class Coalescing:
    """A transport that gathers a stream's writes into one per turn of the event loop; a large
    write, and what must leave at once (`write_now`), go after what is gathered."""

    __slots__ = ("_close", "_loop", "_pending", "_transport")

    def __init__(
        self, transport: asyncio.Transport, *, close: Callable[[], None] | None = None
    ) -> None:
        self._transport = transport
        # How the connection ends once everything is written (the protocol's: it may linger).
        self._close = close if close is not None else transport.close
        self._loop = asyncio.get_running_loop()
        self._pending: list[bytes] = []

    def write(self, data: bytes) -> None:
        if len(data) > JOIN_AT_MOST:
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
        """Write `data` at once, after anything collected: a whole answer, a stream's head."""
        if self._pending:
            self._flush()
        if not self._transport.is_closing():
            self._transport.write(data)

    def close(self) -> None:
        self._flush()
        self._close()

    def write_eof(self) -> None:
        self._flush()
        self._transport.write_eof()

    def _flush(self) -> None:
        if self._pending:
            pending, self._pending = self._pending, []
            if not self._transport.is_closing():
                self._transport.write(b"".join(pending))

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
