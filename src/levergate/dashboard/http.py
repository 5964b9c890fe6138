"""The dashboard over HTTP. The pages and their scripts are static files shipped in the package
(levergate/assets/dashboard/: no build step, uPlot vendored from npm with its licence); the
data is JSON behind `access.viewer_of`:

    GET /dashboard                         the live page (charts, health, the request table)
    GET /dashboard/keys                    the keys page (the admin API's /admin/keys)
    GET /dashboard/static/{name}           its scripts, styles and uPlot
    GET /dashboard/api/session             who is looking, and what this gateway has on
    GET /dashboard/api/overview            every chart's numbers over `range` (5m to 7d;
                                           default 1h), filtered by tenant, key, model,
                                           feature, workflow or outcome
    GET /dashboard/api/requests            the request table: `range`, the request log's
                                           filters, `limit` (1 to dashboard.max_page_size) and
                                           `cursor`; newest first, without bodies
    GET /dashboard/api/requests/{id}       one request's records; bodies for the admin only
    GET /dashboard/api/spend               spend and savings per tenant and per key over `range`
                                           (up to MAX_SPEND_ROWS of each; `*_truncated`)

A bad range, filter, page size or cursor is a 400 naming the parameter. Without the request
log (`request_log.enabled` off) the log's charts are empty and `log.enabled` says why; the
metrics' part still shows.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

import orjson

from levergate.dashboard import data, metrics
from levergate.dashboard.access import Viewer, viewer_of
from levergate.errors import BadRequest, NotFound
from levergate.requestlog.query import LogFilter, decode_cursor, parse_filter
from levergate.server.exchange import Request, Response
from levergate.server.params import limit_of, query
from levergate.server.route import Route

if TYPE_CHECKING:
    from levergate.config import Settings
    from levergate.dashboard.extension import Dashboard
    from levergate.requestlog.store import LogStore

__all__ = ["STATIC", "routes"]

_HTML = "text/html; charset=utf-8"
# The files a page may ask for, and their types: nothing else under the folder is served.
STATIC = {
    "dashboard.js": "text/javascript; charset=utf-8",
    "keys.js": "text/javascript; charset=utf-8",
    "common.js": "text/javascript; charset=utf-8",
    "dashboard.css": "text/css; charset=utf-8",
    "uPlot.iife.min.js": "text/javascript; charset=utf-8",
    "uPlot.min.css": "text/css; charset=utf-8",
    "uPlot.LICENSE": "text/plain; charset=utf-8",
}
PAGES = {"/dashboard": "index.html", "/dashboard/keys": "keys.html"}
# Scripts and styles from the gateway only: a value a client put in the log (a model name, a
# feature) can never run as script, even if a page wrote it as HTML by mistake.
_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'"
)
_TABLE_FILTERS = frozenset({"range", "limit", "cursor"})
# Tenants and keys the spend lists hold at most (the most requests first), each list's
# `*_truncated` saying when there were more. The log's default of 100 groups once left the
# 101st key off, and the keys page showed it spending $0.00; 10,000 keys is the keyring's own
# cache bound (layers/keys/keyring.py).
MAX_SPEND_ROWS = 10_000


@cache
def asset(name: str) -> bytes:
    """A file of levergate/assets/dashboard, read once."""
    return resources.files("levergate").joinpath("assets", "dashboard", name).read_bytes()


def _file(name: str, content_type: str) -> Response:
    headers = [("content-type", content_type), ("cache-control", "no-cache"),
               ("x-content-type-options", "nosniff")]  # fmt: skip
    if content_type == _HTML:
        headers += [("content-security-policy", _CSP), ("referrer-policy", "no-referrer")]
    return Response(200, headers, asset(name))


def _json(payload: Any) -> Response:
    return Response(200, [("content-type", "application/json"), ("cache-control", "no-store")],
                    orjson.dumps(payload))  # fmt: skip


def _scope(params: dict[str, str], *, allowed: frozenset[str]) -> tuple[data.Window, LogFilter]:
    """The window (`range`) and the log's filters; `since`/`until` are the window's to set."""
    for name in ("since", "until"):
        if name in params:
            raise BadRequest(f"Use 'range' (5m to 7d) instead of {name!r}.", param=name)
    where = parse_filter(params, allowed=allowed)
    at = data.window(params.get("range", "1h"), now=time.time())
    return at, replace(where, since=at.since, until=at.until)


def _from_log(store: LogStore, where: LogFilter, at: data.Window) -> dict[str, Any]:
    """Every chart the log feeds, in one visit to the reader's thread: six scans of the range
    (a week of 200,000 records took ~3 s in all on the loaded 2-core development machine, so
    the page asks for long ranges less often)."""
    summary = store.summary(where)
    samples = store.latencies(where)
    outcomes = store.groups(where, by="outcome")
    return {
        "log": {"enabled": True},
        "totals": data.totals(summary, at.until - at.since),
        "series": data.series(store.series(where, bucket_seconds=at.bucket), at),
        "latency": data.latency(samples, at, sampled=len(samples) < summary["requests"]),
        "errors": [g for g in outcomes if g["outcome"] != "ok"],
        "caches": data.caches(store.groups(where, by="cache")),
        "models": store.groups(where, by="model"),
    }


def spend_of(store: LogStore, where: LogFilter, *, most: int = MAX_SPEND_ROWS) -> dict[str, Any]:
    """Spend per tenant and per key, each list cut at `most` and saying whether it was."""
    found: dict[str, Any] = {}
    for name, by in (("tenants", "tenant"), ("keys", "key_id")):
        groups = store.groups(where, by=by, limit=most + 1)
        found[name] = groups[:most]
        found[f"{name}_truncated"] = len(groups) > most
    return found


def _without_log(at: data.Window) -> dict[str, Any]:
    """The same shape with nothing in it: the charts draw empty."""
    return {
        "log": {"enabled": False, "why": "The request log is off (request_log.enabled)."},
        "totals": data.totals({}, at.until - at.since), "series": data.series([], at),
        "latency": data.latency([], at, sampled=False), "errors": [], "caches": [], "models": [],
    }  # fmt: skip


def _shown(record: dict[str, Any], viewer: Viewer) -> dict[str, Any]:
    """A record as `viewer` may see it: the prompt and answer text for the admin only."""
    logged = record.get("request_body") is not None or record.get("answer_body") is not None
    if viewer.sees_bodies:
        return {**record, "bodies": "shown" if logged else "not_logged"}
    return {**record, "request_body": None, "answer_body": None,
            "bodies": "hidden" if logged else "not_logged"}  # fmt: skip


def _enabled(settings: Settings) -> bool:
    return settings.dashboard.enabled


def routes(feature: Dashboard) -> list[Route]:
    host = feature.host

    async def guard(_edge: object, request: Request) -> None:
        await viewer_of(host, request)

    def api(path: str, handler: Any) -> Route:
        return Route("GET", f"/dashboard/api/{path}", handler, guard=guard, enabled=_enabled)

    def page(path: str) -> Route:
        async def serve(_edge: object, _request: Request) -> Response:
            return _file(PAGES[path], _HTML)

        return Route("GET", path, serve, enabled=_enabled)

    async def static(_edge: object, request: Request) -> Response:
        name = request.params["name"]
        if name not in STATIC:
            raise NotFound(f"Unknown path: {request.path}", code="unknown_url")
        return _file(name, STATIC[name])

    handlers = Handlers(feature)
    return [
        *(page(path) for path in PAGES),
        Route("GET", "/dashboard/static/{name}", static, enabled=_enabled),
        api("session", handlers.session),
        api("overview", handlers.overview),
        api("requests", handlers.requests),
        api("requests/{request_id}", handlers.record),
        api("spend", handlers.spend),
    ]


class Handlers:
    """The JSON routes: each reads the log on its reader's thread, the metrics off the loop."""

    def __init__(self, feature: Dashboard) -> None:
        self._feature = feature
        self._host = feature.host

    async def session(self, _edge: object, request: Request) -> Response:
        settings = self._host.settings
        viewer = await viewer_of(self._host, request)
        return _json({
            "object": "dashboard.session", "viewer": str(viewer),
            "request_log": self._feature.log() is not None,
            "admin_api": settings.admin.enabled and viewer is Viewer.ADMIN,
            "poll_seconds": settings.dashboard.poll_seconds, "levers": list(data.LEVERS),
            "ranges": {"min_seconds": data.MIN_RANGE, "max_seconds": data.MAX_RANGE},
        })  # fmt: skip

    async def overview(self, _edge: object, request: Request) -> Response:
        at, where = _scope(query(request), allowed=frozenset({"range"}))
        log = self._feature.log()
        found: dict[str, Any] = {"object": "dashboard.overview", "window": at.describe(),
                                 "filters": where.describe()}  # fmt: skip
        if log is None:
            found |= _without_log(at)
        else:
            found |= await log.reader.run(lambda store: _from_log(store, where, at))
        registry = self._host.recorder.telemetry.registry
        found |= metrics.read(await asyncio.to_thread(metrics.collect, registry))
        return _json(found)

    async def requests(self, _edge: object, request: Request) -> Response:
        params = query(request)
        s = self._host.settings.dashboard
        limit = limit_of(params, default=min(s.page_size, s.max_page_size), most=s.max_page_size)
        cursor = decode_cursor(params["cursor"]) if "cursor" in params else None
        at, where = _scope(params, allowed=_TABLE_FILTERS)
        log = self._feature.log()
        if log is None:
            return _json({"object": "list", "data": [], "has_more": False, "next_cursor": None,
                          "window": at.describe()})  # fmt: skip
        page = await log.reader.run(lambda store: store.page(where, cursor=cursor, limit=limit))
        return _json({"object": "list", "data": [_shown(r, Viewer.READER) for r in page.records],
                      "has_more": page.next_cursor is not None, "next_cursor": page.next_cursor,
                      "window": at.describe()})  # fmt: skip

    async def record(self, _edge: object, request: Request) -> Response:
        viewer = await viewer_of(self._host, request)
        request_id = request.params["request_id"]
        where = parse_filter({"request_id": request_id})
        log = self._feature.log()
        if log is None:
            raise NotFound("The request log is off: no request can be looked up.",
                           code="request_log_off")  # fmt: skip
        page = await log.reader.run(lambda store: store.page(where, cursor=None, limit=20))
        if not page.records:
            raise NotFound(f"No record of request {request_id[:128]!r} in the request log.",
                           code="request_not_found")  # fmt: skip
        return _json({"object": "dashboard.request", "request_id": request_id,
                      "data": [_shown(r, viewer) for r in page.records]})  # fmt: skip

    async def spend(self, _edge: object, request: Request) -> Response:
        at, where = _scope(query(request), allowed=frozenset({"range"}))
        log = self._feature.log()
        found: dict[str, Any] = {"object": "dashboard.spend", "window": at.describe(),
                                 "log": {"enabled": log is not None}}  # fmt: skip
        if log is None:
            return _json({**found, "tenants": [], "keys": [], "tenants_truncated": False,
                          "keys_truncated": False})  # fmt: skip
        return _json({**found, **await log.reader.run(lambda store: spend_of(store, where))})
