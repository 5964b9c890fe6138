"""`AnthropicUpstream`: Anthropic's Messages API as a per-endpoint transport (`kind: anthropic`).

Bottom of the stack, like `OpenAIUpstream`, whose exchange it reuses whole: the HTTP client,
the phase timeouts and the total deadline, the answer caps, the redaction of secrets, the error
tree (an Anthropic error body has an `error` object with a `message`, which the shared error
path reads; 401/403 become 502 as for any upstream; 429 and `retry-after` feed Retry; 500, 529
`overloaded_error` and other 5xx are `UpstreamUnavailable`, retried and sent to fallbacks as a
503 is). What differs is only the wire format, in four hooks:

- `_request`: the OpenAI chat body -> `POST /v1/messages` (protocol/anthropic/upstream_request.py),
  with `x-api-key`, `anthropic-version` and `anthropic-beta` headers;
- `_note_quota`: `anthropic-ratelimit-*` (RFC 3339 resets) -> the call's `Quota`, which the
  balancer and Retry's backoff floor read as they read `x-ratelimit-*`;
- `_completed`: the Anthropic message -> an OpenAI `chat.completion`
  (protocol/anthropic/upstream_answer.py, with the usage contract the ledger prices);
- `_events`: Anthropic stream events -> OpenAI chunks (protocol/anthropic/upstream_stream.py).

`count_tokens` asks the provider's own `/v1/messages/count_tokens` for the Anthropic edge's
count_tokens route (server/handlers/anthropic.py), over the same exchange.

Only chat calls are served: Anthropic has no completions or embeddings endpoint (a 400 says so).
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Callable, Mapping
from typing import Any

import orjson
from pydantic import SecretStr

from levergate.config import AnthropicUpstreamSettings
from levergate.core.call import Call, Trace
from levergate.core.reply import Completed, Event, EventSource
from levergate.errors import BadRequest, UpstreamError, UpstreamUnavailable
from levergate.protocol.anthropic.upstream_answer import (
    anthropic_quota,
    chat_completion,
    provider_error,
)
from levergate.protocol.anthropic.upstream_request import to_messages_request
from levergate.protocol.anthropic.upstream_stream import StreamError, StreamTranslator
from levergate.protocol.sse import SSEDecoder
from levergate.upstreams.http import OpenAIUpstream, close_chunks, event_object, perf_deadline
from levergate.upstreams.stream_timer import StreamTimer
from levergate.upstreams.wire import HttpClient, HttpResponse

MESSAGES_PATH = "/v1/messages"
COUNT_TOKENS_PATH = "/v1/messages/count_tokens"


class AnthropicUpstream(OpenAIUpstream):
    events_batched = False  # its `_events` translates event by event

    def __init__(
        self,
        settings: AnthropicUpstreamSettings,
        *,
        client: HttpClient,
        wall: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(settings, client=client)
        self._base = api_root(settings)
        self._headers = {"content-type": "application/json", **auth_headers(settings)}
        self._default_max_tokens = settings.default_max_tokens
        self._wall = wall

    def _request(self, call: Call) -> tuple[str, bytes]:
        if call.kind != "chat":
            raise BadRequest(
                f"upstream '{self.name}' is Anthropic's Messages API, which serves chat only, "
                f"not {call.kind} requests",
                code="unsupported_by_upstream",
            )
        request = to_messages_request(call.body, default_max_tokens=self._default_max_tokens)
        return self._base + MESSAGES_PATH, orjson.dumps(request)

    def _note_quota(self, headers: Mapping[str, str], trace: Trace) -> None:
        trace.quota = anthropic_quota(headers, now=self._wall())

    def _completed(
        self,
        raw: bytes,  # noqa: ARG002 - re-encoded: the client gets the OpenAI shape
        data: dict[str, Any],
        *,
        headers: dict[str, str],
    ) -> Completed:
        if data.get("type") != "message":
            raise UpstreamUnavailable(
                f"upstream '{self.name}' returned a body that is not an Anthropic message",
                upstream=self.name,
            )
        completion = chat_completion(data, created=int(self._wall()))
        return Completed(data=completion, headers=headers)

    async def count_tokens(self, body: Mapping[str, Any]) -> int:
        """Anthropic's own count of a Messages request's prompt (`POST
        /v1/messages/count_tokens`, exact for Claude models): `body` is the client's request,
        its `model` already this upstream's name. Failures are the upstream error tree."""
        data = await self._post_json(COUNT_TOKENS_PATH, orjson.dumps(body))
        tokens = data.get("input_tokens")
        if type(tokens) is not int or tokens < 0:
            raise UpstreamUnavailable(
                f"upstream '{self.name}' returned a token count that is not a count",
                upstream=self.name,
            )
        return tokens

    async def models(self) -> list[dict[str, Any]]:
        """Anthropic's `GET /v1/models`, in OpenAI's model-object shape."""
        return [
            {"id": m["id"], "object": "model", "created": 0, "owned_by": "anthropic"}
            for m in await self._listed("/v1/models")
            if isinstance(m.get("id"), str)
        ]

    async def _events(
        self, response: HttpResponse, trace: Trace, deadline: float, call: Call
    ) -> EventSource:
        translator = StreamTranslator(created=int(self._wall()), model=call.model)
        window = self._scrub.window() if self._scrub is not None else None
        try:
            async for data in self._data(response, trace, deadline):
                parsed = event_object(data, upstream=self.name)
                try:
                    chunks = translator.feed(parsed)
                except StreamError as exc:
                    raise self._anthropic_stream_error(exc.error) from None
                for chunk in chunks:
                    if window is None:
                        yield Event.of(chunk)
                        continue
                    for ready in window.feed(Event.of(chunk)):
                        yield ready
                if translator.done:
                    for ready in window.flush() if window is not None else ():
                        yield ready
                    return
            raise UpstreamUnavailable(
                f"upstream '{self.name}' ended the stream before it was complete",
                upstream=self.name,
                code="stream_interrupted",
            )
        finally:
            await response.aclose()

    async def _data(
        self, response: HttpResponse, trace: Trace, deadline: float
    ) -> AsyncGenerator[bytes, None]:
        """The `data` payload of each SSE event, under the idle and total timeouts."""
        decoder = SSEDecoder(max_event_bytes=self._limits.event_bytes)
        chunks = response.chunks()
        timer = StreamTimer(idle=self._settings.timeouts.idle, deadline=deadline)
        try:
            until = perf_deadline(deadline)
            while (chunk := await self._next_chunk(chunks, trace, until, timer)) is not None:
                for data in self._decoded(decoder, chunk):
                    yield data
        finally:
            timer.close()
            await close_chunks(chunks)

    def _anthropic_stream_error(self, error: Mapping[str, Any]) -> UpstreamError:
        provider = self._redact.scrub(provider_error(error))
        return UpstreamUnavailable(
            f"upstream '{self.name}' reported an error mid-stream: {provider.get('message')}",
            upstream=self.name,
            code="stream_error",
            provider_error={**provider, "code": "stream_error"},
        )


def api_root(settings: AnthropicUpstreamSettings) -> str:
    """The API root requests are made under (`/v1/...` is appended): the SDK's `base_url`
    convention, with a trailing `/v1` tolerated."""
    return settings.base_url.rstrip("/").removesuffix("/v1")


def auth_headers(
    settings: AnthropicUpstreamSettings, key: SecretStr | None = None, *, keyed: bool = False
) -> dict[str, str]:
    """Anthropic's request headers: `anthropic-version` (and `-beta`), the configured extra
    headers, and the key in `x-api-key` (`key` when `keyed`, else the settings' own)."""
    headers = {"anthropic-version": settings.anthropic_version, **settings.headers}
    if settings.anthropic_beta:
        headers["anthropic-beta"] = ",".join(settings.anthropic_beta)
    secret = key if keyed else settings.api_key
    if secret is not None:
        headers["x-api-key"] = secret.get_secret_value()
    return headers
