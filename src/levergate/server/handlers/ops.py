"""Operations endpoints: liveness, readiness (503 until the gateway has started) and the
Prometheus scrape (guarded: `server.guards.metrics_token`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from levergate.server.exchange import Request, Response

if TYPE_CHECKING:
    from levergate.server.edge import Edge

JSON = "application/json"


async def healthz(_edge: Edge, _request: Request) -> Response:
    return Response(200, [("content-type", JSON)], b'{"status":"ok"}')


async def readyz(edge: Edge, _request: Request) -> Response:
    if not edge.gateway.ready:
        return Response(503, [("content-type", JSON)], b'{"status":"starting"}')
    return Response(200, [("content-type", JSON)], b'{"status":"ok"}')


async def metrics(edge: Edge, _request: Request) -> Response:
    body = generate_latest(edge.gateway.pipeline.telemetry.registry)
    return Response(200, [("content-type", CONTENT_TYPE_LATEST)], body)
