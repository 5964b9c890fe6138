"""The request log over HTTP, on the admin API's credential (`server.guards.admin_token`) and
present only when `admin.enabled` (a 404 otherwise, like every admin route):

    GET /admin/log           records, newest first: the filters of requestlog/query.py, `limit`
                             (1 to request_log.max_page_size; default page_size) and `cursor`
                             (a page's `next_cursor`) -> {"object": "list", "data": [...],
                             "has_more", "next_cursor"}
    GET /admin/log/summary   the same filters: totals (requests, errors, tokens, cost, savings by
                             lever) and, with `bucket=SECONDS`, a time series, with `by=COLUMN`
                             (model, alias, tenant, key_id, feature, workflow, outcome,
                             upstream, kind, cache, origin, tier, priority) a table per value

The shadow labels: `GET /admin/labels` and `/admin/labels/counts` (requestlog/labels_http.py).
A bad filter, page size or cursor is a 400 naming the parameter; a store that cannot answer a
503 with `Retry-After`.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

import orjson

from levergate.errors import BadRequest
from levergate.requestlog.query import LogFilter, decode_cursor, parse_filter
from levergate.requestlog.store import GROUPS
from levergate.server.exchange import Request, Response
from levergate.server.guards import admin_token
from levergate.server.params import limit_of, query
from levergate.server.route import Route

if TYPE_CHECKING:
    from levergate.config import Settings
    from levergate.requestlog.extension import RequestLog

__all__ = ["MAX_BUCKETS", "routes"]

MAX_BUCKETS = 10_000


def _admin_on(settings: Settings) -> bool:
    return settings.admin.enabled


def _json(data: Any) -> Response:
    return Response(200, [("content-type", "application/json"), ("cache-control", "no-store")],
                    orjson.dumps(data))  # fmt: skip


def routes(feature: RequestLog) -> list[Route]:
    settings = feature.settings
    reader = feature.reader

    async def records(_edge: object, request: Request) -> Response:
        params = query(request)
        where = parse_filter(params, allowed=frozenset({"limit", "cursor"}))
        limit = limit_of(params, default=min(settings.page_size, settings.max_page_size),
                         most=settings.max_page_size)  # fmt: skip
        cursor = decode_cursor(params["cursor"]) if "cursor" in params else None
        page = await reader.run(lambda store: store.page(where, cursor=cursor, limit=limit))
        return _json({"object": "list", "data": page.records, "filters": where.describe(),
                      "has_more": page.next_cursor is not None,
                      "next_cursor": page.next_cursor})  # fmt: skip

    async def summary(_edge: object, request: Request) -> Response:
        params = query(request)
        where = parse_filter(params, allowed=frozenset({"bucket", "by"}))
        bucket = _bucket(params.get("bucket"), where)
        by = params.get("by")
        if by is not None and by not in GROUPS:
            raise BadRequest(f"'by' must be one of {', '.join(sorted(GROUPS))}.", param="by")

        def run(store: Any) -> dict[str, Any]:
            found: dict[str, Any] = {"object": "log.summary", "filters": where.describe(),
                                     **store.summary(where)}  # fmt: skip
            if bucket is not None:
                found["series"] = store.series(where, bucket_seconds=bucket)
            if by is not None:
                found["groups"] = store.groups(where, by=by)
            return found

        return _json(await reader.run(run))

    from levergate.requestlog.labels_http import label_routes

    return [
        Route("GET", "/admin/log", records, guard=admin_token, enabled=_admin_on),
        Route("GET", "/admin/log/summary", summary, guard=admin_token, enabled=_admin_on),
        *label_routes(feature),
    ]


def _bucket(text: str | None, where: LogFilter) -> float | None:
    """A series' bucket in seconds: it needs `since`, and gives at most `MAX_BUCKETS`."""
    if text is None:
        return None
    try:
        bucket = float(text)
    except ValueError:
        bucket = math.nan
    if not math.isfinite(bucket) or bucket < 1:
        raise BadRequest("'bucket' must be a number of seconds >= 1.", param="bucket")
    if where.since is None:
        raise BadRequest("A series ('bucket') needs 'since'.", param="since")
    until = where.until if where.until is not None else time.time()
    if (until - where.since) / bucket > MAX_BUCKETS:
        raise BadRequest(f"At most {MAX_BUCKETS} buckets: widen 'bucket'.", param="bucket")
    return bucket
