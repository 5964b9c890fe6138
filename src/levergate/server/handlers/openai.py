"""The OpenAI protocol: chat completions, completions, embeddings (each a `Call` through the
pipeline) and the model list.

A stream is answered once its first generated token has arrived (or the stream has ended
without one), with everything before it: the head, the role preamble and that first token leave
in one write, the client reads them in one go, and a failure before the first token still
becomes a proper HTTP error (below the edge, Retry and Fallback act on failures before the
first event). After that, a failure becomes an OpenAI-style `error` event and the stream ends
without `[DONE]`.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import orjson

from levergate.core.call import Call, Kind
from levergate.core.reply import Completed, Event, Reply, Stream
from levergate.errors import BadRequest, LevergateError, ModelNotFound
from levergate.gateway import REQUEST_ID_HEADER
from levergate.protocol.openai.body import has_generated_token
from levergate.protocol.sse import DONE_FRAME, encode
from levergate.server.exchange import Request, Response

if TYPE_CHECKING:
    from levergate.server.edge import Edge

log = logging.getLogger("levergate.edge")

JSON = "application/json"
ENDPOINT_OF = {"chat": "/v1/chat/completions", "completion": "/v1/completions",
               "embedding": "/v1/embeddings"}  # fmt: skip
SSE_HEADERS = (
    ("content-type", "text/event-stream; charset=utf-8"),
    ("cache-control", "no-cache"),
    ("x-accel-buffering", "no"),
)


async def _models_for(edge: Edge, request: Request) -> list[dict[str, Any]]:
    """The models the caller may name: every one, or with auth on those its key allows (the
    route's `client_key` guard put the key on the request)."""
    models = await edge.gateway.list_models()
    key = request.key
    return models if key is None else [m for m in models if key.allows(str(m.get("id")))]


async def list_models(edge: Edge, request: Request) -> Response:
    data = {"object": "list", "data": await _models_for(edge, request)}
    return Response(200, [("content-type", JSON)], orjson.dumps(data))


async def retrieve_model(edge: Edge, request: Request) -> Response:
    """One model object, as `client.models.retrieve` expects; 404 `model_not_found` otherwise.
    The same list as `/v1/models`: behind a `*` model, the upstream's own list decides."""
    wanted = request.params["model"]
    for model in await _models_for(edge, request):
        if model.get("id") == wanted:
            return Response(200, [("content-type", JSON)], orjson.dumps(model))
    raise ModelNotFound(wanted)


async def _call(kind: Kind, edge: Edge, request: Request) -> Response:
    """A request that runs through the pipeline as a `Call` of `kind`."""
    call = edge.gateway.make_call(
        kind,
        request.json(),
        headers=request.headers,
        trace=request.trace,
        raw=request.body,
        request_id=request.request_id,
    )
    if (ask := call.ctx.controls.run_async) is not None:  # async / defer / deadline / webhook
        for divert in edge.diverts:  # a feature's: async requests (batch/http.py)
            answered = await divert(edge, request, ENDPOINT_OF[kind], ask)
            if answered is not None:
                return answered
        raise BadRequest("Async requests are off on this gateway (async_requests.enabled).",
                         code="async_disabled")  # fmt: skip
    reply = await edge.gateway.serve(call)
    if isinstance(reply, Completed):  # `respond`'s whole answer, without its coroutine
        return whole(call, reply, chunk_bytes=edge.chunk_bytes)
    return await respond(call, reply, frames=_frames, chunk_bytes=edge.chunk_bytes)


# Partials rather than wrappers: the hot path pays for no extra coroutine.
chat_completions = partial(_call, "chat")
completions = partial(_call, "completion")
embeddings = partial(_call, "embedding")


Frames = Callable[[Stream, list[Event]], AsyncGenerator[bytes, None]]


async def respond(call: Call, reply: Reply, *, frames: Frames, chunk_bytes: int) -> Response:
    """A whole answer as JSON (above `chunk_bytes`, in chunks of it, each sent when the client
    has taken the last: a slow reader holds the event loop for no copy of the whole), or a
    stream answered at its first generated token and framed by `frames` (the protocol's SSE
    shape: chat's `data:` + `[DONE]`, the Responses API's `event:` + `data:`)."""
    if isinstance(reply, Completed):
        return whole(call, reply, chunk_bytes=chunk_bytes)
    meta = [*reply.headers.items(), (REQUEST_ID_HEADER, call.ctx.request_id)]
    try:
        opening = await _opening(reply)
    except BaseException:
        await reply.aclose()
        raise
    return Response(200, [*SSE_HEADERS, *meta], stream=frames(reply, opening))


def whole(call: Call, reply: Completed, *, chunk_bytes: int) -> Response:
    """A whole answer as JSON: `respond`'s, callable without a coroutine (the usual answer,
    an exact-cache hit above all: a coroutine made and run is ~1k instructions)."""
    headers = [("content-type", JSON), *reply.headers.items(),
               (REQUEST_ID_HEADER, call.ctx.request_id)]  # fmt: skip
    size = reply.size
    if size > chunk_bytes:
        return Response(reply.status, headers, stream=_chunks(reply.parts, chunk_bytes),
                        length=size)  # fmt: skip
    return Response(reply.status, headers, reply.raw)


async def _chunks(parts: list[bytes], size: int) -> AsyncGenerator[bytes, None]:
    """`parts` as chunks of about `size` bytes: small parts joined, large ones cut."""
    group: list[bytes] = []
    held = 0
    for part in parts:
        for at in range(0, len(part), size):
            piece = part[at : at + size] if len(part) > size else part
            group.append(piece)
            held += len(piece)
            if held >= size:
                yield b"".join(group)
                group, held = [], 0
    if group:
        yield b"".join(group)


async def _opening(stream: Stream) -> list[Event]:
    """The events up to and including the batch (`Stream.batches`) with the first one that
    carries a generated token (all of them if none does): what arrived with it goes out with
    it."""
    events: list[Event] = []
    async for batch in stream.batches():
        events += batch
        if any(has_generated_token(event.json()) for event in batch):
            break
    return events


def _encoded(events: list[Event]) -> bytes:
    """`encode` of each event, joined: one join however many events."""
    return b"data: " + b"\n\ndata: ".join([event.data for event in events]) + b"\n\n"


async def _frames(stream: Stream, opening: list[Event]) -> AsyncGenerator[bytes, None]:
    try:
        if opening:
            yield _encoded(opening)
        async for batch in stream.batches():  # one frame for what arrived together
            if len(batch) == 1:
                yield b"data: " + batch[0].data + b"\n\n"  # `encode`, inline
            else:
                yield _encoded(batch)
        yield DONE_FRAME
    except LevergateError as exc:
        log.warning("stream ended by %s: %s", type(exc).__name__, exc.message)
        yield encode(orjson.dumps(exc.to_json()))
    finally:
        await stream.aclose()
