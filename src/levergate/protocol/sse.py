"""Server-sent events, both ways. The decoder is incremental: feed it whatever bytes arrived and it
returns the events completed so far, so a stream is passed on event by event, never buffered."""

from __future__ import annotations

DONE = b"[DONE]"
DONE_FRAME = b"data: [DONE]\n\n"


def encode(data: bytes) -> bytes:
    """One `data:` frame. JSON from orjson never contains a raw newline, so one line suffices."""
    return b"data: " + data + b"\n\n"


class SSEDecoder:
    """Splits a byte stream into the `data` payloads of its events (multi-line data joined by
    newlines, comments and other fields dropped, CRLF or LF line ends)."""

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        buffer = self._buffer + chunk if self._buffer else chunk
        held = b""
        if b"\r" in buffer:
            if buffer.endswith(b"\r"):
                # A CR at the end may be the first half of a CRLF split across two chunks.
                buffer, held = buffer[:-1], b"\r"
            buffer = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        events: list[bytes] = []
        start = 0
        while True:
            end = buffer.find(b"\n\n", start)
            if end < 0:
                break
            payload = _data_of(buffer[start:end])
            if payload is not None:
                events.append(payload)
            start = end + 2
        self._buffer = buffer[start:] + held
        return events

    @property
    def pending(self) -> bytes:
        """Bytes of an event not yet terminated: non-empty at end of stream means a cut stream."""
        return self._buffer


def _data_of(block: bytes) -> bytes | None:
    if block.startswith(b"data: ") and b"\n" not in block:
        return block[6:]
    lines: list[bytes] = []
    for line in block.split(b"\n"):
        if line.startswith(b"data:"):
            value = line[5:]
            lines.append(value[1:] if value.startswith(b" ") else value)
    return b"\n".join(lines) if lines else None
