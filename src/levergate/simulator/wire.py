"""HTTP/1.1 response framing for the simulator's server: the head, and chunks of a chunked body.

Every response carries `x-simulated: levergate-sim`, so nothing downstream can mistake the
simulator's answers for a real provider's.
"""

from __future__ import annotations

from http import HTTPStatus

from levergate.simulator.responses import Reply
from levergate.simulator.settings import SIMULATED_HEADER, SIMULATED_VALUE

_COMMON = f"{SIMULATED_HEADER}: {SIMULATED_VALUE}\r\n".encode()
_STATUS_LINES = {s.value: f"HTTP/1.1 {s.value} {s.phrase}\r\n".encode() for s in HTTPStatus}
_CHUNKED = b"transfer-encoding: chunked\r\ncache-control: no-cache\r\n"


def head(reply: Reply, *, length: int | None, keep_alive: bool) -> bytes:
    """Status line and headers; `length` None means a chunked body."""
    status = _STATUS_LINES.get(reply.status) or f"HTTP/1.1 {reply.status} Unknown\r\n".encode()
    framing = _CHUNKED if length is None else b"content-length: %d\r\n" % length
    extra = _header_lines(reply.headers) if reply.headers else b""
    return b"%scontent-type: %s\r\n%s%s%s%s\r\n" % (
        status,
        reply.content_type.encode(),
        _COMMON,
        framing,
        extra,
        b"" if keep_alive else b"connection: close\r\n",
    )


def _header_lines(headers: tuple[tuple[str, str], ...]) -> bytes:
    return "".join([f"{name}: {value}\r\n" for name, value in headers]).encode()


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)
