"""The access log (`server.access_log`): one line per request the app answered, written when
the answer is over (a stream's line comes when the stream ends, with its whole duration).

uvicorn's own access line is not used: it is written when the head goes out (a stream's time
unknown), it carries no request id, and it went through uvicorn's logging setup, which
`levergate serve` had raised to WARNING (`server.access_log: true` printed nothing). These lines
go through the `levergate.access` logger, so the redaction filter and the process's format
(`log_format: text | json`, levergate/logs.py) apply: in JSON, the parts are fields of their own.

Requests the HTTP protocol refuses before the app sees them (431, 408, the connection cap's
503: server/http_protocol.py) are not in it; their warnings are.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

from levergate.gateway import REQUEST_ID_HEADER

log = logging.getLogger("levergate.access")

CLIENT_CLOSED = 499  # the client went away before the answer began (nginx's status)


def write(
    scope: Mapping[str, Any],
    *,
    status: int,
    started: float,
    headers: Iterable[tuple[str, str]] = (),
) -> None:
    """Log one finished request; `started` is its `time.perf_counter()` at arrival and
    `headers` the response's (the request id is read from them)."""
    millis = round((time.perf_counter() - started) * 1000, 3)
    request_id = next((v for k, v in headers if k == REQUEST_ID_HEADER), "")
    client = scope.get("client")
    peer = f"{client[0]}:{client[1]}" if client else "-"
    path = scope["path"]
    query = scope.get("query_string", b"")
    if query:
        path = f"{path}?{query.decode('latin-1')}"
    method = scope["method"]
    fields = {
        "client": peer, "method": method, "path": path, "status": status,
        "duration_ms": millis, "request_id": request_id,
    }  # fmt: skip
    log.info(
        '%s "%s %s" %d %.3fms %s', peer, method, path, status, millis, request_id or "-",
        extra={"fields": fields},
    )  # fmt: skip
