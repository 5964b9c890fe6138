"""Operations endpoints: liveness, readiness and the Prometheus scrape (guarded:
`server.guards.metrics_token`; written off the event loop, `Telemetry.exposition`).

`/healthz` is liveness: 200 while the process answers HTTP at all (restart it when it does not).
Under `levergate serve --workers N` it names the worker process that answered
(`x-levergate-worker: <pid>`), so an operator can see connections spread over the workers.
`/readyz` is readiness (layers/traffic/readiness.py): 200 `{"status": "ok"}` when the gateway
can serve, 200 `degraded` with the aliases that cannot, 503 `starting`, `draining` (from the
shutdown signal on, `server.drain_seconds`) or `unavailable` with the aliases that cannot serve.
A load balancer sends traffic only to a 200."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import orjson
from prometheus_client import CONTENT_TYPE_LATEST

from levergate.server.exchange import Request, Response

if TYPE_CHECKING:
    from levergate.server.edge import Edge

JSON = "application/json"
WORKER_HEADER = "x-levergate-worker"


async def healthz(edge: Edge, _request: Request) -> Response:
    headers = [("content-type", JSON)]
    if edge.gateway.settings.server.workers > 1:
        headers.append((WORKER_HEADER, str(os.getpid())))
    return Response(200, headers, b'{"status":"ok"}')


async def readyz(edge: Edge, _request: Request) -> Response:
    readiness = edge.gateway.readiness()
    body: dict[str, object] = {"status": readiness.status}
    if readiness.unavailable:
        body["unavailable"] = list(readiness.unavailable)
    status = 200 if readiness.ready else 503
    return Response(status, [("content-type", JSON), ("cache-control", "no-store")],
                    orjson.dumps(body))  # fmt: skip


async def metrics(edge: Edge, _request: Request) -> Response:
    body = await edge.gateway.metrics()
    return Response(200, [("content-type", CONTENT_TYPE_LATEST)], body)
