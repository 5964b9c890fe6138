"""Server-sent events, both ways. The decoder is incremental: feed it whatever bytes arrived and it
returns the events completed so far, so a stream is passed on event by event, never buffered.

Where in the stack: `upstreams.http` decodes every upstream stream with it, the bench client its
answers. An upstream is not trusted to be sane, so the decoder is linear in the bytes fed (each
byte is scanned and copied a bounded number of times, however the stream is split) and holds at
most `max_event_bytes` of an unterminated event before it gives up with `EventTooLarge`.
Measured before this shape: one 300 MB event without a terminator took 65 s of CPU and 834 MB,
because every chunk re-joined and re-scanned everything pending.
"""

from __future__ import annotations

DONE = b"[DONE]"
DONE_FRAME = b"data: [DONE]\n\n"


def encode(data: bytes) -> bytes:
    """One `data:` frame. JSON from orjson never contains a raw newline, so one line suffices."""
    return b"data: " + data + b"\n\n"


class EventTooLarge(ValueError):
    """One event grew past the decoder's `max_event_bytes` before its terminating blank line."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"an event is larger than the limit of {limit} bytes")
        self.limit = limit


class SSEDecoder:
    """Splits a byte stream into the `data` payloads of its events (multi-line data joined by
    newlines, comments and other fields dropped, CRLF or LF line ends).

    Invariant between calls: `_parts` holds the unterminated tail of the stream, normalised to LF
    line ends, never containing a blank line; `_held_cr` says a CR ended the last chunk (it may
    be the first half of a CRLF split across two chunks). `max_event_bytes` bounds an event's
    text without its terminating blank line (None: unbounded)."""

    __slots__ = ("_held_cr", "_limit", "_parts", "_size")

    def __init__(self, *, max_event_bytes: int | None = None) -> None:
        self._parts: list[bytes] = []
        self._size = 0
        self._held_cr = False
        self._limit = max_event_bytes

    def feed(self, chunk: bytes) -> list[bytes]:
        if self._held_cr or chunk.find(b"\r") >= 0:  # not `in`: core/reply.py's docstring
            chunk = self._normalised(chunk)
        events: list[bytes] = []
        parts = self._parts
        if parts and chunk[:1] == b"\n" and parts[-1].endswith(b"\n"):
            # The blank line that ends the pending event straddles the two chunks.
            self._emit(b"".join(parts)[:-1], events)
            parts.clear()
            self._size = 0
            chunk = chunk[1:]
        # One split a chunk, not a search an event: every piece but the last is a whole event.
        *blocks, rest = chunk.split(b"\n\n")
        if blocks:
            if parts:
                parts.append(blocks[0])
                blocks[0] = b"".join(parts)
                parts.clear()
                self._size = 0
            limit = self._limit
            for block in blocks:
                if (
                    (limit is None or len(block) <= limit)
                    and block.startswith(b"data: ")
                    and block.find(b"\n") < 0  # not `in`: core/reply.py's docstring
                ):
                    events.append(block[6:])  # the common case: one single-line data event
                else:
                    self._emit(block, events)
        if rest:
            parts.append(rest)
            self._size += len(rest)
            # A trailing LF may be half of the terminator: it is not part of the event's text.
            if self._limit is not None and self._size - rest.endswith(b"\n") > self._limit:
                raise EventTooLarge(self._limit)
        return events

    @property
    def pending(self) -> bytes:
        """Bytes of an event not yet terminated: non-empty at end of stream means a cut stream."""
        return b"".join(self._parts) + (b"\r" if self._held_cr else b"")

    @property
    def pending_bytes(self) -> int:
        """How much the decoder holds right now: what bounds its memory."""
        return self._size + self._held_cr

    def _normalised(self, chunk: bytes) -> bytes:
        if self._held_cr:
            chunk = b"\r" + chunk
            self._held_cr = False
        if b"\r" in chunk:
            if chunk.endswith(b"\r"):
                chunk = chunk[:-1]
                self._held_cr = True
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        return chunk

    def _emit(self, block: bytes, events: list[bytes]) -> None:
        if self._limit is not None and len(block) > self._limit:
            raise EventTooLarge(self._limit)
        if block.startswith(b"data: ") and block.find(b"\n") < 0:
            events.append(block[6:])
            return
        payload = _data_of(block)
        if payload is not None:
            events.append(payload)


def _data_of(block: bytes) -> bytes | None:
    lines: list[bytes] = []
    for line in block.split(b"\n"):
        if line.startswith(b"data:"):
            value = line[5:]
            lines.append(value[1:] if value.startswith(b" ") else value)
    return b"\n".join(lines) if lines else None
