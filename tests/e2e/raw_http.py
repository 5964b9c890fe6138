"""A raw socket client for the gateway's HTTP/1 server: exact bytes out, exact bytes in, for the
tests of framing, limits and timeouts that an HTTP client library would hide."""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

import orjson

BODY = orjson.dumps(
    {"model": "sim-small", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
)
# A hang guard only (no test asserts a duration): added to a configured timeout, or alone.
MARGIN = 10.0


def post_head(*extra: bytes, body: bytes = BODY, version: bytes = b"HTTP/1.1") -> bytes:
    lines = [b"POST /v1/chat/completions " + version, b"host: x", b"content-type: application/json",
             *extra, b"content-length: %d" % len(body)]  # fmt: skip
    return b"\r\n".join(lines) + b"\r\n\r\n"


async def connect(url: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    port = urlsplit(url).port
    assert port is not None
    return await asyncio.open_connection("127.0.0.1", port)


async def read_response(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """One response framed by its content-length: (head, body)."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    return head, await reader.readexactly(length)


async def read_error(reader: asyncio.StreamReader, *, within: float) -> tuple[int, dict[str, str]]:
    """An error response and then the end of the connection: (status, the OpenAI error)."""
    head, body = await asyncio.wait_for(read_response(reader), within)
    assert b"\r\nconnection: close\r\n" in head.lower()
    assert await asyncio.wait_for(reader.read(), within) == b""
    return int(head.split(b" ", 2)[1]), orjson.loads(body)["error"]
