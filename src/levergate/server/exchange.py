"""What a route handler receives and returns, independent of any HTTP framework.

A `Request` carries the matched route's path parameters and, for the route's body, either the
whole body (`body`: small JSON routes, read under the route's limit before the handler runs) or
an async iterator of chunks (`chunks`: streaming routes such as uploads, the limit enforced as
the chunks arrive). The adapters (`server.asgi`, `server.transport`) supply the bytes through a
`BodySource`; the edge decides, per route, which of the two a handler gets.

A `Response` is whole (`body`), a stream of chunks (`stream`: SSE, or a file read from disk),
and says its length up front when it knows it (`length`: a file), so the adapters send a
`content-length` instead of chunked framing.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from levergate.core.call import Trace
from levergate.core.json_bound import TooDeep, parse_json
from levergate.errors import BadRequest, PayloadTooLarge
from levergate.gateway import request_id_for

if TYPE_CHECKING:
    from levergate.core.controls import Principal
    from levergate.stores.keys import KeyRecord

# The parameters of a static path: shared, and never written to.
NO_PARAMS: Mapping[str, str] = MappingProxyType({})


class BodySource(Protocol):
    """A request's body as the adapter receives it; the edge reads it once, one way or the
    other, and either way never past `limit` bytes (413 beyond it)."""

    async def read(self, *, limit: int) -> bytes: ...

    def chunks(self, *, limit: int) -> AsyncIterator[bytes]: ...


class Request:
    """One request as a handler sees it. `request_id` is chosen on first use (most answers that
    run no call never need one) and is the same for the call, its logs and any error."""

    __slots__ = (
        "_request_id",
        "body",
        "chunks",
        "headers",
        "key",
        "method",
        "params",
        "path",
        "principal",
        "query",
        "trace",
    )

    # Positional: built once per request on the hot path, where keyword arguments cost twice
    # as much (measured); only the edge builds one.
    def __init__(self, method: str, path: str, headers: Mapping[str, str], trace: Trace, /) -> None:
        self.method = method
        self.path = path
        self.headers = headers
        self.trace = trace
        self.params = NO_PARAMS
        # The raw query string ("" for none): list endpoints read their paging from it.
        self.query = ""
        self.body = b""
        # Set instead of `body` on streaming routes: iterate it once; it raises
        # PayloadTooLarge as soon as the chunks pass the route's limit.
        self.chunks: AsyncIterator[bytes] | None = None
        self._request_id: str | None = None
        # The caller once a `client_key` guard has identified it (levergate/principal.py), and
        # its key record (None: auth off).
        self.principal: Principal | None = None
        self.key: KeyRecord | None = None

    @property
    def request_id(self) -> str:
        if self._request_id is None:
            self._request_id = request_id_for(self.headers)
        return self._request_id

    def json(self) -> Any:
        """The body parsed as JSON; a 400 `invalid_json` when it is not, `json_too_deep` when
        it nests deeper than the gateway parses anywhere (core/json_bound.py)."""
        try:
            return parse_json(self.body)
        except TooDeep as exc:
            raise BadRequest(
                f"The JSON body nests arrays and objects deeper than {exc.limit} levels, the "
                "most this gateway accepts.",
                code="json_too_deep",
            ) from None
        except orjson.JSONDecodeError as exc:
            raise BadRequest(
                f"We could not parse the JSON body of your request: {exc.msg}.",
                code="invalid_json",
            ) from None


@dataclass(slots=True)
class Response:
    status: int
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""
    stream: AsyncGenerator[bytes, None] | None = None
    # The stream's total size when known in advance (a file): sent as content-length.
    length: int | None = None


def file_response(
    path: Path, *, content_type: str, chunk_bytes: int, status: int = 200
) -> Response:
    """A file on disk, sent in chunks of `chunk_bytes` and never whole in memory; its size is
    taken now, so the response says its content-length up front. The file is opened when the
    first chunk is wanted (a HEAD answer never opens it)."""
    size = path.stat().st_size
    return Response(
        status,
        [("content-type", content_type)],
        stream=_file_chunks(path, size=size, chunk_bytes=chunk_bytes),
        length=size,
    )


async def _file_chunks(path: Path, *, size: int, chunk_bytes: int) -> AsyncGenerator[bytes, None]:
    # Disk reads run in a thread so a slow disk never stalls the event loop; exactly `size`
    # bytes go out, as the content-length promised.
    fd = await asyncio.to_thread(os.open, path, os.O_RDONLY)
    try:
        left = size
        while left > 0:
            chunk = await asyncio.to_thread(os.read, fd, min(chunk_bytes, left))
            if not chunk:
                raise OSError(f"{path} shrank while it was being sent")
            left -= len(chunk)
            yield chunk
    finally:
        os.close(fd)


class BytesBody:
    """A body already in memory: the library's callers and benchmarks that pass bytes."""

    __slots__ = ("_data",)

    def __init__(self, data: bytes) -> None:
        self._data = data

    async def read(self, *, limit: int) -> bytes:
        if len(self._data) > limit:
            raise PayloadTooLarge.over(limit)
        return self._data

    async def chunks(self, *, limit: int) -> AsyncIterator[bytes]:
        if len(self._data) > limit:
            raise PayloadTooLarge.over(limit)
        if self._data:
            yield self._data


def declared_length(headers: Mapping[str, str], *, limit: int) -> int | None:
    """The content-length the client declared, refused at once when it is over `limit`."""
    declared = headers.get("content-length")
    if declared is None or not declared.isdigit():
        return None
    size = int(declared)
    if size > limit:
        raise PayloadTooLarge.over(limit)
    return size


def body_cut_short() -> BadRequest:
    return BadRequest("The request body ended before it was complete.", code="incomplete_body")
