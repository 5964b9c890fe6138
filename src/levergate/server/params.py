"""What the routes that run no call read from a request — the query string, a list's `limit` —
and how they answer JSON (who the caller is: `server.guards.caller`): shared by the core's
handlers and the features' (the Batch API, async requests), part of the edge's surface for
features (see `server.route`)."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

import orjson

from levergate.errors import BadRequest
from levergate.server.exchange import Request, Response

__all__ = ["json_response", "limit_of", "page", "query"]

JSON = "application/json"


def query(request: Request) -> dict[str, str]:
    """The query string's parameters, each given once: a repeated one (`tenant=a&tenant=b`)
    is a 400 naming it, not its first value taken silently (asked for "a or b", the first
    alone was answered)."""
    if len(request.query) > 4096:
        raise BadRequest("The query string is too long.")
    found = parse_qs(request.query)
    for name, values in found.items():
        if len(values) > 1:
            raise BadRequest(f"'{name[:64]}' is given {len(values)} times; give it once.",
                             param=name[:64])  # fmt: skip
    return {k: v[0] for k, v in found.items()}


def limit_of(params: dict[str, str], *, default: int, most: int) -> int:
    text = params.get("limit")
    if text is None:
        return default
    # ASCII only: `isdigit` is true of '²', which `int` refuses (a 500 until 2026-12)
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= most:
        raise BadRequest(f"'limit' must be an integer from 1 to {most}.", param="limit")
    return int(text)


def json_response(data: Any) -> Response:
    return Response(200, [("content-type", JSON)], orjson.dumps(data))


def page(data: list[dict[str, Any]], *, has_more: bool) -> Response:
    return json_response({
        "object": "list", "data": data, "has_more": has_more,
        "first_id": data[0]["id"] if data else None, "last_id": data[-1]["id"] if data else None,
    })  # fmt: skip
