"""The request log's labels over HTTP, on the admin API's credential, present only when
`admin.enabled` (like `GET /admin/log`, requestlog/http.py): what `levergate labels export
--url`, `levergate router train --from-log --url` and `levergate cache threshold --url` read from
a running gateway.

    GET /admin/labels         labels oldest first: `name` (a route, cascade or cached model),
                              `layer` (route, cascade, semantic, challenger; several
                              comma-separated), `since`, `until`, `uncompared` (true: failed and
                              `none` rows too), `limit` (1 to request_log.max_page_size) and
                              `cursor` (a page's `next_cursor`) -> {"object": "list", "data",
                              "has_more", "next_cursor"}
    GET /admin/labels/counts  per layer, name, model pair and day: labels, agreeing, with a
                              prompt (`name`, `layer`, `since`, `until`)

Anything else, or a bad value, is a 400 naming the parameter.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import orjson

from levergate.errors import BadRequest
from levergate.requestlog.labels import Labelled
from levergate.requestlog.query import MAX_TEXT, decode_cursor, encode_cursor, parse_time
from levergate.server.exchange import Response
from levergate.server.guards import admin_token
from levergate.server.params import limit_of, query
from levergate.server.route import Route

if TYPE_CHECKING:
    from levergate.config import Settings
    from levergate.requestlog.extension import RequestLog
    from levergate.server.exchange import Request

__all__ = ["LAYERS", "label_routes", "labelled_of"]

LAYERS = frozenset({"route", "cascade", "semantic", "challenger"})
_WHICH = frozenset({"name", "layer", "since", "until", "uncompared"})


def _admin_on(settings: Settings) -> bool:
    return settings.admin.enabled


def _json(data: Any) -> Response:
    # Labels may carry prompts and answers: never kept by a cache on the way.
    return Response(200, [("content-type", "application/json"), ("cache-control", "no-store")],
                    orjson.dumps(data))  # fmt: skip


def labelled_of(params: Mapping[str, str], *, allowed: frozenset[str] = frozenset()) -> Labelled:
    """Which labels the query asks for; any other parameter but `allowed` is a 400."""
    unknown = sorted(set(params) - _WHICH - allowed)
    if unknown:
        known = ", ".join(sorted(_WHICH | allowed))
        raise BadRequest(f"Unknown parameter {unknown[0]!r}; known: {known}.", param=unknown[0])
    name = params.get("name")
    if name is not None and not 1 <= len(name) <= MAX_TEXT:
        raise BadRequest(f"'name' must be 1 to {MAX_TEXT} characters.", param="name")
    layers = None
    if "layer" in params:
        layers = tuple(params["layer"].split(","))
        if not layers or any(layer not in LAYERS for layer in layers):
            raise BadRequest(f"'layer' must be one or more of {', '.join(sorted(LAYERS))}, "
                             "comma-separated.", param="layer")  # fmt: skip
    since, until = (None if (v := params.get(p)) is None else parse_time(v, param=p)
                    for p in ("since", "until"))  # fmt: skip
    if since is not None and until is not None and since > until:
        raise BadRequest("'since' is after 'until'.", param="since")
    flag = params.get("uncompared", "false")
    if flag not in ("true", "false"):
        raise BadRequest("'uncompared' must be true or false.", param="uncompared")
    return Labelled(name=name, since=since, until=until, layers=layers,
                    uncompared=flag == "true")  # fmt: skip


def label_routes(feature: RequestLog) -> list[Route]:
    settings = feature.settings
    reader = feature.reader

    async def labels(_edge: object, request: Request) -> Response:
        params = query(request)
        which = labelled_of(params, allowed=frozenset({"limit", "cursor"}))
        limit = limit_of(params, default=min(settings.page_size, settings.max_page_size),
                         most=settings.max_page_size)  # fmt: skip
        after = decode_cursor(params["cursor"]) if "cursor" in params else None
        rows = await reader.run(lambda store: store.labels(which, limit=limit + 1, after=after))
        more = len(rows) > limit
        rows = rows[:limit]
        cursor = encode_cursor((rows[-1]["ts"], rows[-1]["seq"])) if more and rows else None
        found: dict[str, Any] = {"object": "list", "data": rows, "has_more": more,
                                 "next_cursor": cursor}  # fmt: skip
        return _json(found)

    async def counts(_edge: object, request: Request) -> Response:
        which = labelled_of(query(request))
        rows = await reader.run(lambda store: store.label_counts(which))
        return _json({"object": "list", "data": rows})

    return [
        Route("GET", "/admin/labels", labels, guard=admin_token, enabled=_admin_on),
        Route("GET", "/admin/labels/counts", counts, guard=admin_token, enabled=_admin_on),
    ]
