"""The Files API (`/v1/files`), as the OpenAI SDKs call it: upload (multipart, streamed to disk),
list, retrieve, content, delete. The work is `BatchService`'s (batch/service.py); here the
wire: the caller's tenant, the query string, the JSON shapes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

import orjson

from levergate.batch.service import BatchService
from levergate.errors import BadRequest, NotFound
from levergate.server.exchange import Request, Response, file_response

if TYPE_CHECKING:
    from levergate.server.edge import Edge

JSON = "application/json"
TENANT_HEADER = "x-levergate-tenant"
MAX_TENANT_CHARS = 128
CHUNK_BYTES = 1 << 20


def service(edge: Edge) -> BatchService:
    found = edge.gateway.batch
    if found is None:  # the routes are off then; unreachable, refuse all the same
        raise NotFound("The Batch API is off (batch.enabled).", code="unknown_url")
    return found


def caller(request: Request) -> tuple[str, str | None]:
    """(tenant, key id): the key's with auth on (the `client_key` guard checked it), else
    `x-levergate-tenant` or "default", as the pipeline's Authenticate decides it."""
    if request.key is not None:
        return request.key.tenant, request.key.id
    tenant = request.headers.get(TENANT_HEADER) or "default"
    if len(tenant) > MAX_TENANT_CHARS:
        raise BadRequest(f"'{TENANT_HEADER}' is longer than {MAX_TENANT_CHARS} characters.")
    return tenant, None


def query(request: Request) -> dict[str, str]:
    if len(request.query) > 4096:
        raise BadRequest("The query string is too long.")
    return {k: v[0] for k, v in parse_qs(request.query).items()}


def limit_of(params: dict[str, str], *, default: int, most: int) -> int:
    text = params.get("limit")
    if text is None:
        return default
    if not text.isdigit() or not 1 <= int(text) <= most:
        raise BadRequest(f"'limit' must be an integer from 1 to {most}.", param="limit")
    return int(text)


def json_response(data: Any) -> Response:
    return Response(200, [("content-type", JSON)], orjson.dumps(data))


def page(data: list[dict[str, Any]], *, has_more: bool) -> Response:
    return json_response({
        "object": "list", "data": data, "has_more": has_more,
        "first_id": data[0]["id"] if data else None, "last_id": data[-1]["id"] if data else None,
    })  # fmt: skip


async def create_file(edge: Edge, request: Request) -> Response:
    tenant, _ = caller(request)
    if request.chunks is None:  # a streaming route always has them
        raise BadRequest("The upload has no body.")
    record = await service(edge).upload(
        request.chunks, content_type=request.headers.get("content-type", ""), tenant=tenant
    )
    return json_response(record.wire())


async def list_files(edge: Edge, request: Request) -> Response:
    tenant, _ = caller(request)
    params = query(request)
    found, more = await service(edge).files(
        tenant=tenant, purpose=params.get("purpose"), after=params.get("after"),
        limit=limit_of(params, default=10_000, most=10_000),
    )  # fmt: skip
    return page([f.wire() for f in found], has_more=more)


async def retrieve_file(edge: Edge, request: Request) -> Response:
    tenant, _ = caller(request)
    record = await service(edge).file(request.params["id"], tenant=tenant)
    return json_response(record.wire())


async def file_content(edge: Edge, request: Request) -> Response:
    tenant, _ = caller(request)
    path = await service(edge).content(request.params["id"], tenant=tenant)
    try:
        return file_response(path, content_type="application/jsonl", chunk_bytes=CHUNK_BYTES)
    except FileNotFoundError:
        raise NotFound("The file's content is gone.", code="file_not_found") from None


async def delete_file(edge: Edge, request: Request) -> Response:
    tenant, _ = caller(request)
    file_id = request.params["id"]
    await service(edge).delete(file_id, tenant=tenant)
    return json_response({"id": file_id, "object": "file", "deleted": True})
