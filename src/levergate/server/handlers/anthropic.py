"""Anthropic's Messages API: `POST /v1/messages` (whole or streamed) and
`POST /v1/messages/count_tokens`, for clients of the official `anthropic` SDK
(`anthropic.Anthropic(base_url=<gateway>, api_key=<gateway key>)`).

A Messages request is translated into the pipeline's OpenAI-shaped chat `Call`
(`protocol/anthropic/edge_request.py`) and served by `Gateway.serve` like any chat call: every lever
(auth by `x-api-key` or bearer, key and tenant limits, the caches, routing, retries,
fallbacks, balancing, endpoint limits) applies unchanged, against any upstream. The answer is
translated back (`protocol/anthropic/edge_answer.py`): a whole `message`, or Anthropic's event
stream. Errors are Anthropic's envelope (`protocol/anthropic/errors.py`), so the SDK raises its own
classes. `anthropic-version` and `anthropic-beta` are accepted and stay on the call's headers.

A stream is answered once its first generated token has arrived, as on the OpenAI route: a
failure before it is still a proper HTTP error (and Retry and Fallback below act on it), one
after it an `event: error` frame that ends the stream without `message_stop`.

count_tokens says where its figure came from in `x-levergate-token-count`. For a model on a
`kind: anthropic` upstream the provider's own `/v1/messages/count_tokens` answers (exact for
Claude models): `reported`. Otherwise, and when that upstream cannot answer (unreachable, a
5xx, a 429, its key refused; a 400 saying the request is wrong reaches the client as it is),
the count is local, with the target model's tokenizer (`core.tokenizer.Tokenizer`: tiktoken for
OpenAI-family models, the text's length otherwise): `counted` or `estimated`; images (a flat
1,600 tokens each, Anthropic's figure for a ~1.15-megapixel image) and blocks carried verbatim
make it an estimate.

Every answer of these routes, errors included, carries the request id twice: `x-request-id`
and Anthropic's `request-id`, which the SDK reads (`message._request_id`, `e.request_id`).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import orjson

from levergate.config import WILDCARD
from levergate.core.reply import Completed, Stream
from levergate.core.tokenizer import TokenCount, Tokenizer, TokenSource
from levergate.errors import (
    LevergateError,
    ModelNotFound,
    PermissionDenied,
    UpstreamError,
    UpstreamRejected,
)
from levergate.gateway import REQUEST_ID_HEADER
from levergate.protocol.anthropic import extensions as ext
from levergate.protocol.anthropic.edge_answer import (
    EventTranslator,
    Frame,
    events_of,
    frame,
    to_message,
)
from levergate.protocol.anthropic.edge_request import to_openai
from levergate.protocol.anthropic.errors import anthropic_error
from levergate.protocol.openai.body import has_generated_token
from levergate.server.exchange import Request, Response
from levergate.server.handlers.openai import JSON, SSE_HEADERS
from levergate.upstreams.anthropic import AnthropicUpstream

if TYPE_CHECKING:
    from levergate.server.edge import Edge
    from levergate.upstreams import Endpoint

log = logging.getLogger("levergate.edge")

TOKEN_COUNT_HEADER = "x-levergate-token-count"  # noqa: S105 - a header name
# Anthropic's request-id header, which the SDK reads (`message._request_id`, `e.request_id`);
# sent beside x-request-id, the same id (server/routes.py sends it on errors too).
REQUEST_ID = "request-id"
IMAGE_TOKENS = 1600
# The provider's statuses for a request that is itself wrong: passed on, never estimated over.
_INVALID = frozenset({400, 413, 422})
# OpenAI's chat framing per message and for the reply's priming (the cookbook's figures).
_PER_MESSAGE = 3
_PRIMING = 3


def error_response(exc: LevergateError) -> Response:
    status, payload, extra = anthropic_error(exc)
    if status >= 500:
        log.warning("%s: %s", type(exc).__name__, exc.message)
    return Response(status, [("content-type", JSON), *extra.items()], orjson.dumps(payload))


async def messages(edge: Edge, request: Request) -> Response:
    gateway = edge.gateway
    translated = to_openai(request.json(), limits=gateway.settings.limits)
    call = gateway.make_call(
        "chat",
        translated.body,
        headers=request.headers,
        trace=request.trace,
        request_id=request.request_id,
    )
    if translated.extensions:
        call = call.with_ctx(extensions=translated.extensions)
    reply = await gateway.serve(call)
    stops: Sequence[str] = translated.body.get("stop") or ()
    rid = call.ctx.request_id
    meta = [*reply.headers.items(), (REQUEST_ID_HEADER, rid), (REQUEST_ID, rid)]
    if isinstance(reply, Completed):
        message = to_message(reply.data, stops=stops, fallback_id=call.ctx.request_id)
        if call.stream:  # a cached or whole answer to a stream: replayed as events
            return Response(200, [*SSE_HEADERS, *meta], stream=_replayed(events_of(message)))
        return Response(200, [("content-type", JSON), *meta], orjson.dumps(message))
    translator = EventTranslator(stops=stops, fallback_id=call.ctx.request_id)
    try:
        opening = await _opening(reply, translator)
    except BaseException:
        await reply.aclose()
        raise
    return Response(200, [*SSE_HEADERS, *meta], stream=_frames(reply, translator, opening))


async def _opening(stream: Stream, translator: EventTranslator) -> list[Frame]:
    """The events up to and including the first generated token's (all, if none comes)."""
    frames: list[Frame] = []
    async for event in stream:
        chunk = event.json()
        frames += translator.feed(chunk)
        if has_generated_token(chunk):
            return frames
    return frames + translator.finish()


async def _frames(
    stream: Stream, translator: EventTranslator, opening: list[Frame]
) -> AsyncGenerator[bytes, None]:
    try:
        yield b"".join([frame(name, payload) for name, payload in opening])
        if opening and opening[-1][0] == "message_stop":
            return
        async for event in stream:
            frames = translator.feed(event.json())
            if frames:
                yield b"".join([frame(name, payload) for name, payload in frames])
        yield b"".join([frame(name, payload) for name, payload in translator.finish()])
    except LevergateError as exc:
        log.warning("stream ended by %s: %s", type(exc).__name__, exc.message)
        yield frame("error", anthropic_error(exc)[1])
    finally:
        await stream.aclose()


async def _replayed(frames: list[Frame]) -> AsyncGenerator[bytes, None]:
    yield b"".join([frame(name, payload) for name, payload in frames])


async def count_tokens(edge: Edge, request: Request) -> Response:
    asked = request.json()
    translated = to_openai(asked, limits=edge.gateway.settings.limits, counting=True)
    body = translated.body
    alias = body["model"]
    if request.key is not None and not request.key.allows(alias):
        raise PermissionDenied(
            f"This API key may not use the model '{alias}'.", code="model_not_allowed"
        )
    model, endpoint = _target(edge, alias)
    if isinstance(endpoint, AnthropicUpstream):
        try:
            tokens = await endpoint.count_tokens({**asked, "model": model})
        except UpstreamError as exc:
            if isinstance(exc, UpstreamRejected) and exc.upstream_status in _INVALID:
                raise  # the provider says the request is wrong: the client hears it
            log.warning("count_tokens: %s; counted locally instead", exc.message)
        else:
            return _count_response(TokenCount(tokens, TokenSource.REPORTED), request.request_id)
    count = prompt_tokens(body, model=model, tokenizer=edge.tokenizer)
    if translated.extensions - ext.HINTS - ext.PASSED:  # blocks carried verbatim: a guess
        count = TokenCount(count.tokens, TokenSource.ESTIMATED)
    return _count_response(count, request.request_id)


def _count_response(count: TokenCount, rid: str) -> Response:
    headers = [("content-type", JSON), (TOKEN_COUNT_HEADER, str(count.how)),
               (REQUEST_ID_HEADER, rid), (REQUEST_ID, rid)]  # fmt: skip
    return Response(200, headers, orjson.dumps({"input_tokens": count.tokens}))


def _target(edge: Edge, alias: str) -> tuple[str, Endpoint | None]:
    """The model name the alias reaches upstream (whose tokenizer counts) and the endpoint
    that serves it; 404 if none does."""
    pipeline = edge.gateway.pipeline
    model = pipeline.models.get(alias)
    if model is None:
        model = pipeline.models.get(WILDCARD)
        if model is None:
            raise ModelNotFound(alias)
        name = alias  # `*` sends the name as the client wrote it
    else:
        name = model.endpoints[0].upstream_model or model.upstream_model or alias
    return name, pipeline.upstreams.get(model.endpoints[0].upstream)


def prompt_tokens(body: Mapping[str, Any], *, model: str, tokenizer: Tokenizer) -> TokenCount:
    """Tokens an OpenAI-shaped chat body's prompt is for `model`: the text of every message,
    tool call and tool definition through the tokenizer, OpenAI's framing per message, and a
    flat figure per image (which makes the count an estimate)."""
    texts: list[str] = []
    images = 0
    messages = body.get("messages", [])
    for message in messages:
        texts.append(str(message.get("role", "")))
        content = message.get("content")
        for part in content if isinstance(content, list) else [content]:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, Mapping) and part.get("type") == "text":
                texts.append(str(part.get("text", "")))
            elif isinstance(part, Mapping) and part.get("type") == "image_url":
                images += 1
            elif isinstance(part, Mapping):
                texts.append(orjson.dumps(part).decode())
        calls = message.get("tool_calls") or ()
        texts += [orjson.dumps(call.get("function")).decode() for call in calls]
    if body.get("tools"):
        texts.append(orjson.dumps(body["tools"]).decode())
    counted = tokenizer.count("\n".join(texts), model=model)
    tokens = counted.tokens + _PER_MESSAGE * len(messages) + _PRIMING + IMAGE_TOKENS * images
    how = TokenSource.ESTIMATED if images else counted.how
    return TokenCount(tokens, TokenSource.COUNTED if how is TokenSource.NONE else how)
