"""The edge, independent of any HTTP framework: (method, path, headers, body) in, a `Response`
out. The ASGI app and the in-process httpx transport are thin adapters over `Edge.handle`, so the
proxy and the library share every behaviour, errors included.

A stream is answered once its first generated token has arrived (or the stream has ended
without one), with everything before it: the head, the role preamble and that first token leave
in one write, the client reads them in one go, and a failure before the first token still
becomes a proper HTTP error (below the edge, Retry and Fallback act on failures before the
first event). After that, a failure becomes an OpenAI-style `error` event and the stream ends
without `[DONE]`.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass, field

import orjson
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from levergate.core.call import Call, Kind, Trace
from levergate.core.reply import Completed, Event, Reply, Stream
from levergate.errors import (
    BadRequest,
    LevergateError,
    MethodNotAllowed,
    NotFound,
    error_payload,
)
from levergate.gateway import REQUEST_ID_HEADER, Gateway
from levergate.protocol.openai import has_generated_token
from levergate.protocol.sse import DONE_FRAME, encode

log = logging.getLogger("levergate.edge")

JSON = "application/json"
SSE_HEADERS = (
    ("content-type", "text/event-stream; charset=utf-8"),
    ("cache-control", "no-cache"),
    ("x-accel-buffering", "no"),
)
CALLS: dict[str, Kind] = {
    "/v1/chat/completions": "chat",
    "/v1/completions": "completion",
    "/v1/embeddings": "embedding",
}
_GETS = frozenset({"/v1/models", "/healthz", "/readyz", "/metrics"})


@dataclass(slots=True)
class Response:
    status: int
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""
    stream: AsyncGenerator[bytes, None] | None = None


class Edge:
    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway

    async def handle(
        self, method: str, path: str, headers: Mapping[str, str], body: bytes, *, trace: Trace
    ) -> Response:
        try:
            kind = CALLS.get(path)
            if kind is not None:
                if method != "POST":
                    raise MethodNotAllowed(f"Use POST for {path}.")
                return await self._call(kind, headers, body, trace)
            if path in _GETS:
                if method not in {"GET", "HEAD"}:
                    raise MethodNotAllowed(f"Use GET for {path}.")
                return await self._get(path)
            if path.startswith("/admin/"):
                # Until the route table holds server/admin.py's ROUTES (imported here: it
                # imports this module).
                from levergate.server.admin import dispatch

                return await dispatch(self.gateway, method, path, headers, body)
            raise NotFound(f"Unknown path: {path}", code="unknown_url")
        except LevergateError as exc:
            return error_response(exc)

    async def _call(
        self, kind: Kind, headers: Mapping[str, str], body: bytes, trace: Trace
    ) -> Response:
        try:
            parsed = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise BadRequest(
                f"We could not parse the JSON body of your request: {exc.msg}.",
                code="invalid_json",
            ) from None
        call = self.gateway.make_call(kind, parsed, headers=headers, trace=trace, raw=body)
        try:
            reply = await self.gateway.serve(call)
            return await _respond(call, reply)
        except LevergateError as exc:
            response = error_response(exc)
            response.headers.append((REQUEST_ID_HEADER, call.ctx.request_id))
            return response

    async def _get(self, path: str) -> Response:
        if path == "/v1/models":
            data = {"object": "list", "data": await self.gateway.models()}
            return Response(200, [("content-type", JSON)], orjson.dumps(data))
        if path == "/metrics":
            body = generate_latest(self.gateway.pipeline.telemetry.registry)
            return Response(200, [("content-type", CONTENT_TYPE_LATEST)], body)
        if path == "/readyz" and not self.gateway.ready:
            return Response(503, [("content-type", JSON)], b'{"status":"starting"}')
        return Response(200, [("content-type", JSON)], b'{"status":"ok"}')


def error_response(exc: LevergateError) -> Response:
    status, payload, extra = error_payload(exc)
    if status >= 500:
        log.warning("%s: %s", type(exc).__name__, exc.message)
    return Response(status, [("content-type", JSON), *extra.items()], orjson.dumps(payload))


async def _respond(call: Call, reply: Reply) -> Response:
    meta = [*reply.headers.items(), (REQUEST_ID_HEADER, call.ctx.request_id)]
    if isinstance(reply, Completed):
        return Response(reply.status, [("content-type", JSON), *meta], reply.raw)
    try:
        opening = await _opening(reply)
    except BaseException:
        await reply.aclose()
        raise
    return Response(200, [*SSE_HEADERS, *meta], stream=_frames(reply, opening))


async def _opening(stream: Stream) -> list[Event]:
    """The events up to and including the first one that carries a generated token (all of
    them if none does)."""
    events: list[Event] = []
    async for event in stream:
        events.append(event)
        if has_generated_token(event.json()):
            break
    return events


async def _frames(stream: Stream, opening: list[Event]) -> AsyncGenerator[bytes, None]:
    try:
        if opening:
            yield b"".join([encode(event.data) for event in opening])
        async for event in stream:
            yield encode(event.data)
        yield DONE_FRAME
    except LevergateError as exc:
        log.warning("stream ended by %s: %s", type(exc).__name__, exc.message)
        yield encode(orjson.dumps(exc.to_json()))
    finally:
        await stream.aclose()
