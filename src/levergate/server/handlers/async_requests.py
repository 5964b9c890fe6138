"""Async single requests over HTTP (batch/async_requests.py does the work).

    POST /v1/async/chat/completions | /v1/async/completions | /v1/async/embeddings
    POST /v1/chat/completions ... with `x-levergate-async: true` (or `x-levergate-defer: 24h`)
        -> 202 {"id": "areq_...", "object": "async_request", "status": "pending", ...}
           with `location: /v1/async/<id>`
    GET  /v1/async/{id}
        -> 200 {"status": "pending" | "completed" | "failed", "response": {"status_code",
           "request_id", "body"} | null, "error": ..., "webhook": ...}

The caller's tenant owns the request: another tenant's id is a 404, like an unknown one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson

from levergate.batch.async_requests import AsyncRequests
from levergate.errors import BadRequest, NotFound
from levergate.server import guards
from levergate.server.exchange import Request, Response
from levergate.server.handlers.files import caller, json_response

if TYPE_CHECKING:
    from levergate.server.edge import Edge

JSON = "application/json"


def _service(edge: Edge) -> AsyncRequests:
    batch = edge.gateway.batch
    found = batch.async_requests if batch is not None else None
    if found is None:
        raise BadRequest("Async requests are off on this gateway (async_requests.enabled).",
                         code="async_disabled")  # fmt: skip
    return found


async def submit(edge: Edge, request: Request, *, endpoint: str, dedicated: bool) -> Response:
    """Accept the request as a job; 202 with its id."""
    service = _service(edge)
    if request.key is None:
        await guards.client_key(edge, request)
    tenant, key_id = caller(request)
    body = request.json()
    job = await service.submit(endpoint, body, headers=request.headers, tenant=tenant,
                               key_id=key_id, dedicated=dedicated)  # fmt: skip
    data = await service.wire(job)
    headers = [("content-type", JSON), ("location", f"/v1/async/{job.id}")]
    return Response(202, headers, orjson.dumps(data))


async def create(edge: Edge, request: Request) -> Response:
    """POST /v1/async/<endpoint>: the endpoint named after the prefix."""
    return await submit(edge, request, endpoint="/v1/" + request.params["rest"], dedicated=True)


async def retrieve(edge: Edge, request: Request) -> Response:
    service = _service(edge)
    tenant, _ = caller(request)
    rest = request.params["rest"]
    if "/" in rest:
        raise NotFound(f"No such async request: {rest[:128]}", code="not_found")
    return json_response(await service.get(rest, tenant=tenant))
