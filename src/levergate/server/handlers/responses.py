"""The OpenAI Responses API at the edge: `POST /v1/responses` as a `response` call through the
pipeline (the ResponsesBridge layer passes it through or translates it, layers/responses.py),
and `GET` / `DELETE /v1/responses/{id}` and `GET /v1/responses/{id}/input_items` on the
responses the gateway kept (stores/responses.py), each only for the tenant that made it.

A stream is sent as the Responses API sends it: `event: <type>` and `data: <json>` per event,
no `[DONE]`. As on the chat route, the head goes out with the first event that carries generated
output, so a failure before it is still a proper HTTP error; a failure after it ends the stream
with an `error` event (after the bridge's `response.failed`, on a translated stream).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any

import orjson

from levergate.core.reply import Event, Stream
from levergate.errors import LevergateError, NotFound
from levergate.server.exchange import Request, Response
from levergate.server.guards import caller
from levergate.server.handlers.openai import JSON, respond

if TYPE_CHECKING:
    from levergate.server.edge import Edge
    from levergate.stores.responses import ResponseStore, StoredResponse

log = logging.getLogger("levergate.edge")


async def create(edge: Edge, request: Request) -> Response:
    call = edge.gateway.make_call(
        "response",
        request.json(),
        headers=request.headers,
        trace=request.trace,
        raw=request.body,
        request_id=request.request_id,
    )
    reply = await edge.gateway.serve(call)
    return await respond(call, reply, frames=_frames, chunk_bytes=edge.chunk_bytes)


_TYPE_HEAD = b'{"type":"'


def frame(event: Event) -> bytes:
    """One Responses SSE frame; the event name is the event's `type`, read from the bytes when
    the event starts with it (every OpenAI and simulator event does), else parsed."""
    data = event.data
    name = b""
    if data.startswith(_TYPE_HEAD):
        end = data.find(b'"', len(_TYPE_HEAD))
        name = data[len(_TYPE_HEAD) : end] if end > 0 else b""
    else:
        kind = event.json().get("type")
        name = kind.encode() if isinstance(kind, str) and kind.isascii() else b""
    # `find`, not `in` (core/reply.py's docstring): twice on every event.
    if name.find(b"\n") >= 0 or name.find(b"\r") >= 0 or name.find(b"\\") >= 0:
        name = b""
    head = b"event: " + name + b"\n" if name else b""
    if data.find(b"\n") >= 0 or data.find(b"\r") >= 0:  # multi-line data: one line on our wire
        data = orjson.dumps(event.json())
    return head + b"data: " + data + b"\n\n"


async def _frames(stream: Stream, opening: list[Event]) -> AsyncGenerator[bytes, None]:
    last: Event | None = opening[-1] if opening else None
    try:
        if opening:
            yield b"".join(frame(e) for e in opening)
        async for batch in stream.batches():  # one frame for what arrived together
            yield b"".join([frame(event) for event in batch])
            last = batch[-1]
    except LevergateError as exc:
        log.warning("responses stream ended by %s: %s", type(exc).__name__, exc.message)
        number = last.json().get("sequence_number") if last is not None else None
        error = {"type": "error", "code": exc.code or exc.type, "message": exc.message,
                 "param": exc.param,
                 "sequence_number": number + 1 if isinstance(number, int) else 0}  # fmt: skip
        yield frame(Event.of(error))
    finally:
        await stream.aclose()


# ---- the kept responses ------------------------------------------------------------------


def _tenant(request: Request) -> str:
    """The tenant Authenticate would name, as the route's `client_key` guard identified it."""
    return caller(request).tenant


async def _found(edge: Edge, request: Request) -> tuple[ResponseStore, StoredResponse]:
    store = edge.gateway.pipeline.shared.responses
    wanted = request.params["id"]
    limit = edge.gateway.settings.responses.max_id_chars
    found = None
    if store is not None and len(wanted) <= limit:
        found = await store.load(wanted, tenant=_tenant(request))
    if store is None or found is None:
        raise NotFound(f"Response with id '{wanted}' not found.", code="response_not_found")
    return store, found


async def retrieve(edge: Edge, request: Request) -> Response:
    _, found = await _found(edge, request)
    return Response(200, [("content-type", JSON)], orjson.dumps(found.response))


async def delete(edge: Edge, request: Request) -> Response:
    store, found = await _found(edge, request)
    response_id = request.params["id"]
    await store.delete(response_id, tenant=found.tenant)
    body = {"id": response_id, "object": "response", "deleted": True}
    return Response(200, [("content-type", JSON)], orjson.dumps(body))


async def input_items(edge: Edge, request: Request) -> Response:
    """This turn's input items, newest first (OpenAI's default order), all on one page: the
    edge reads no query string, and a turn holds at most `responses.max_input_items`."""
    _, found = await _found(edge, request)
    items = [_with_id(item, index) for index, item in enumerate(found.input)]
    items.reverse()
    body = {
        "object": "list",
        "data": items,
        "has_more": False,
        "first_id": items[0]["id"] if items else None,
        "last_id": items[-1]["id"] if items else None,
    }
    return Response(200, [("content-type", JSON)], orjson.dumps(body))


def _with_id(item: dict[str, Any], index: int) -> dict[str, Any]:
    shaped = {"type": "message", **item} if "type" not in item else dict(item)
    shaped.setdefault("id", f"item_{index}")
    if isinstance(shaped.get("content"), str):
        shaped["content"] = [{"type": "input_text", "text": shaped["content"]}]
    return shaped
