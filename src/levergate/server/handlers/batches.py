"""The Batches API (`/v1/batches`), as the OpenAI SDKs call it: create, retrieve, list (newest
first, `after` + `limit`, `has_more`), cancel. The work is `BatchService`'s."""

from __future__ import annotations

from typing import TYPE_CHECKING

from levergate.server.exchange import Request, Response
from levergate.server.handlers.files import caller, json_response, limit_of, page, query, service

if TYPE_CHECKING:
    from levergate.server.edge import Edge


async def create_batch(edge: Edge, request: Request) -> Response:
    tenant, key_id = caller(request)
    body = request.json()
    batches = service(edge)
    job = await batches.create(body, tenant=tenant, key_id=key_id)
    _, counts = await batches.get(job.id, tenant=tenant)
    return json_response(job.wire(counts))


async def retrieve_batch(edge: Edge, request: Request) -> Response:
    tenant, _ = caller(request)
    job, counts = await service(edge).get(request.params["id"], tenant=tenant)
    return json_response(job.wire(counts))


async def list_batches(edge: Edge, request: Request) -> Response:
    tenant, _ = caller(request)
    params = query(request)
    found, more = await service(edge).batches(
        tenant=tenant, after=params.get("after"), limit=limit_of(params, default=20, most=100)
    )
    return page([job.wire(counts) for job, counts in found], has_more=more)


async def cancel_batch(edge: Edge, request: Request) -> Response:
    tenant, _ = caller(request)
    job, counts = await service(edge).cancel(request.params["id"], tenant=tenant)
    return json_response(job.wire(counts))
