"""The Batch API's routes: Files (`/v1/files`: upload streamed to disk, list, retrieve, content,
delete), Batches (`/v1/batches`: create, retrieve, list newest first with `after` + `limit` and
`has_more`, cancel) as the OpenAI SDKs call them, and async single requests:

    POST /v1/async/chat/completions | /v1/async/completions | /v1/async/embeddings
    POST /v1/chat/completions ... with `x-levergate-async: true` (or `x-levergate-defer: 24h`)
        -> 202 {"id": "areq_...", "object": "async_request", "status": "pending", ...}
           with `location: /v1/async/<id>`
    GET  /v1/async/{id}
        -> 200 {"status": "pending" | "completed" | "failed", "response": {"status_code",
           "request_id", "body"} | null, "error": ..., "webhook": ...}

The work is `BatchService`'s and `AsyncRequests`'; here the wire: the caller's tenant, the query
string, the JSON shapes. Everything a tenant names is looked up under its tenant: another
tenant's id is a 404, like an unknown one. The handlers are bound to the service (no reach
through the gateway); the first argument, the edge, only goes on to the `client_key` guard.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from levergate.control_headers import async_controls
from levergate.core.controls import AsyncAsk
from levergate.errors import BadRequest, NotFound
from levergate.server.exchange import Request, Response, file_response
from levergate.server.guards import caller, client_key
from levergate.server.params import json_response, limit_of, page, query
from levergate.server.route import Divert, Handler, Route

if TYPE_CHECKING:
    from levergate.batch.async_requests import AsyncRequests
    from levergate.batch.service import BatchService

JSON = "application/json"
CHUNK_BYTES = 1 << 20


class FilesAndBatches:
    """`/v1/files` and `/v1/batches` over one `BatchService`."""

    def __init__(self, service: BatchService) -> None:
        self._service = service

    def routes(self) -> list[Route]:
        """Each on a client key, as for /v1/models."""
        return [
            _keyed("POST", "/v1/files", self.create_file, stream=True),
            _keyed("GET", "/v1/files", self.list_files),
            _keyed("GET", "/v1/files/{id}", self.retrieve_file),
            _keyed("DELETE", "/v1/files/{id}", self.delete_file),
            _keyed("GET", "/v1/files/{id}/content", self.file_content),
            _keyed("POST", "/v1/batches", self.create_batch),
            _keyed("GET", "/v1/batches", self.list_batches),
            _keyed("GET", "/v1/batches/{id}", self.retrieve_batch),
            _keyed("POST", "/v1/batches/{id}/cancel", self.cancel_batch),
        ]

    async def create_file(self, _edge: object, request: Request) -> Response:
        tenant = caller(request).tenant
        if request.chunks is None:  # a streaming route always has them
            raise BadRequest("The upload has no body.")
        record = await self._service.upload(
            request.chunks, content_type=request.headers.get("content-type", ""), tenant=tenant
        )
        return json_response(record.wire())

    async def list_files(self, _edge: object, request: Request) -> Response:
        tenant = caller(request).tenant
        params = query(request)
        found, more = await self._service.files(
            tenant=tenant, purpose=params.get("purpose"), after=params.get("after"),
            limit=limit_of(params, default=10_000, most=10_000),
        )  # fmt: skip
        return page([f.wire() for f in found], has_more=more)

    async def retrieve_file(self, _edge: object, request: Request) -> Response:
        tenant = caller(request).tenant
        record = await self._service.file(request.params["id"], tenant=tenant)
        return json_response(record.wire())

    async def file_content(self, _edge: object, request: Request) -> Response:
        tenant = caller(request).tenant
        path = await self._service.content(request.params["id"], tenant=tenant)
        try:
            return file_response(path, content_type="application/jsonl", chunk_bytes=CHUNK_BYTES)
        except FileNotFoundError:
            raise NotFound("The file's content is gone.", code="file_not_found") from None

    async def delete_file(self, _edge: object, request: Request) -> Response:
        tenant = caller(request).tenant
        file_id = request.params["id"]
        await self._service.delete(file_id, tenant=tenant)
        return json_response({"id": file_id, "object": "file", "deleted": True})

    async def create_batch(self, _edge: object, request: Request) -> Response:
        who = caller(request)
        tenant = who.tenant
        body = request.json()
        job = await self._service.create(body, tenant=tenant, key_id=who.key_id)
        _, counts = await self._service.get(job.id, tenant=tenant)
        return json_response(job.wire(counts))

    async def retrieve_batch(self, _edge: object, request: Request) -> Response:
        tenant = caller(request).tenant
        job, counts = await self._service.get(request.params["id"], tenant=tenant)
        return json_response(job.wire(counts))

    async def list_batches(self, _edge: object, request: Request) -> Response:
        tenant = caller(request).tenant
        params = query(request)
        found, more = await self._service.batches(
            tenant=tenant, after=params.get("after"), limit=limit_of(params, default=20, most=100)
        )
        return page([job.wire(counts) for job, counts in found], has_more=more)

    async def cancel_batch(self, _edge: object, request: Request) -> Response:
        tenant = caller(request).tenant
        job, counts = await self._service.cancel(request.params["id"], tenant=tenant)
        return json_response(job.wire(counts))


class AsyncRoutes:
    """`/v1/async/...`, and the divert that takes over an ordinary model call whose controls ask
    to run later (`x-levergate-async`, `-defer`, `-deadline`, `-webhook`)."""

    def __init__(self, requests: AsyncRequests) -> None:
        self._requests = requests

    def routes(self) -> list[Route]:
        return [_keyed("POST", "/v1/async/{rest:path}", self.create),
                _keyed("GET", "/v1/async/{rest:path}", self.retrieve)]  # fmt: skip

    def diverts(self) -> list[Divert]:
        return [self.divert]

    async def divert(
        self, edge: Any, request: Request, endpoint: str, ask: AsyncAsk
    ) -> Response | None:
        return await self.submit(edge, request, endpoint=endpoint, dedicated=False, ask=ask)

    async def submit(
        self, edge: Any, request: Request, *, endpoint: str, dedicated: bool,
        ask: AsyncAsk | None = None,
    ) -> Response:  # fmt: skip
        """Accept the request as a job; 202 with its id. `ask`: the async controls the ordinary
        route's call already parsed; the dedicated route parses them here (the same parser)."""
        if ask is None:
            ask = async_controls(request.headers) or AsyncAsk()
        if request.principal is None:  # the ordinary route with async headers: unguarded so far
            await client_key(edge, request)
        who = caller(request)
        body = request.json()
        job = await self._requests.submit(endpoint, body, ask=ask, tenant=who.tenant,
                                          key_id=who.key_id, dedicated=dedicated)  # fmt: skip
        data = await self._requests.wire(job)
        headers = [("content-type", JSON), ("location", f"/v1/async/{job.id}")]
        return Response(202, headers, orjson.dumps(data))

    async def create(self, edge: Any, request: Request) -> Response:
        """POST /v1/async/<endpoint>: the endpoint named after the prefix."""
        endpoint = "/v1/" + request.params["rest"]
        return await self.submit(edge, request, endpoint=endpoint, dedicated=True)

    async def retrieve(self, _edge: object, request: Request) -> Response:
        tenant = caller(request).tenant
        rest = request.params["rest"]
        if "/" in rest:
            raise NotFound(f"No such async request: {rest[:128]}", code="not_found")
        return json_response(await self._requests.get(rest, tenant=tenant))


def _keyed(method: str, path: str, handler: Handler, *, stream: bool = False) -> Route:
    return Route(method, path, handler, guard=client_key, stream=stream)
