"""`Gateway`: settings plus the built pipeline — the one core behind the library and the proxy.

Both edges (the ASGI app and the httpx transport) and the library methods go through
`Gateway.make_call` and `Gateway.serve`, so a request behaves the same whichever way it came in.

    async with Gateway(Settings.for_upstream("http://127.0.0.1:8000/v1")) as gw:
        reply = await gw.chat(model="m", messages=[{"role": "user", "content": "hi"}])
        async for chunk in await gw.chat(model="m", messages=[...], stream=True): ...
        client = openai.AsyncOpenAI(api_key="-", base_url="http://levergate/v1",
                                    http_client=httpx.AsyncClient(transport=gw.transport()))
        claude = anthropic.AsyncAnthropic(api_key="-", base_url="http://levergate",
                                          http_client=httpx2.AsyncClient(transport=gw.httpx2_transport()))

    gw = Gateway(settings)  # synchronous code: the gateway lives on the transport's loop thread
    with httpx.Client(transport=gw.sync_transport()) as http:
        client = openai.OpenAI(api_key="-", base_url="http://levergate/v1", http_client=http)
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from levergate.config import WILDCARD, RequestLimits, Settings
from levergate.core.call import Call, Context, Kind, Priority, Trace
from levergate.core.reply import Completed, EventSource, Reply, Stream
from levergate.errors import BadRequest, LevergateError
from levergate.pipeline import Deps, Pipeline, build_pipeline
from levergate.protocol.openai import check_body, is_usage_only
from levergate.redact import Redactor
from levergate.redact import install as install_redaction

if TYPE_CHECKING:
    import httpx
    import httpx2

    from levergate.batch.service import BatchService

FEATURE_HEADER = "x-levergate-feature"
PRIORITY_HEADER = "x-levergate-priority"
TIMEOUT_HEADER = "x-levergate-timeout"
REQUEST_ID_HEADER = "x-request-id"
# A client's x-request-id is kept only if it is this short and made of these characters (it is
# echoed in headers and written to logs); anything else gets a fresh id.
_CLIENT_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


class Gateway:
    def __init__(self, settings: Settings | None = None, *, deps: Deps | None = None) -> None:
        self.settings = settings or Settings.load()
        self.pipeline: Pipeline = build_pipeline(self.settings, deps)
        # Every configured secret, scrubbed from the errors `serve` hands out and from every
        # levergate log record (levergate/redact.py).
        self.redactor = Redactor.of(self.settings)
        install_redaction(self.redactor)
        self.ready = False
        self._jobs: list[asyncio.Future[None]] = []
        # The Batch API and its runner (levergate/batch/), when `batch.enabled`.
        self.batch: BatchService | None = None
        if self.settings.batch.enabled:
            from levergate.batch.service import BatchService

            self.batch = BatchService(self)

    @classmethod
    def from_config(cls, path: str | Path) -> Gateway:
        return cls(Settings.load(path))

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def start(self) -> None:
        """Start the pipeline's background jobs, each under the pipeline's supervisor (a crash is
        logged, counted and restarted); idempotent. The ASGI lifespan calls this too."""
        if self._jobs:
            return
        keep_running = self.pipeline.supervisor.keep_running
        background = [*self.pipeline.background, *([self.batch.job()] if self.batch else [])]
        self._jobs = [asyncio.ensure_future(keep_running(job)) for job in background]
        self.ready = True

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        self.ready = False
        jobs, self._jobs = self._jobs, []
        for job in jobs:
            job.cancel()
        await asyncio.gather(*jobs, return_exceptions=True)
        if self.batch is not None:
            await self.batch.aclose()
        await self.pipeline.aclose()

    # ---- the core, shared by every edge -------------------------------------------------

    def make_call(
        self,
        kind: Kind,
        body: Any,
        *,
        headers: Mapping[str, str] | None = None,
        trace: Trace | None = None,
        raw: bytes | None = None,
        request_id: str | None = None,
    ) -> Call:
        """Check the body and read the request's controls from its headers and metadata.
        `raw` is the JSON text the body was parsed from, if the caller has it; `request_id` the
        id the edge already chose (`request_id_for`), else it is chosen here."""
        limits = self.settings.limits
        body = check_body(kind, body, limits=limits)
        headers = headers or {}
        metadata = body.get("metadata")
        feature = headers.get(FEATURE_HEADER) or (
            metadata.get("feature", "") if isinstance(metadata, dict) else ""
        )
        deadline = None
        if timeout := headers.get(TIMEOUT_HEADER):
            # On the gateway's clock, which every layer compares it with and enforces it on.
            deadline = self.pipeline.clock.now() + _timeout_seconds(timeout, limits=limits)
        ctx = Context(
            request_id=request_id or request_id_for(headers),
            priority=Priority.parse(headers.get(PRIORITY_HEADER)),
            deadline=deadline,
            feature=feature if isinstance(feature, str) else "",
            headers=headers,
            trace=trace or Trace(),
        )
        return Call(kind=kind, body=body, ctx=ctx, raw=raw)

    async def serve(self, call: Call) -> Reply:
        """Run the call through the pipeline. A stream comes back with the usage chunk removed
        unless the client asked for it (the gateway always asks the upstream for it)."""
        try:
            reply = await self.pipeline.service(call)
        except LevergateError as exc:
            self.redactor.scrub_error(exc)
            raise
        if isinstance(reply, Stream) and not call.wants_usage_chunk:
            return reply.through(_drop_usage_chunk)
        return reply

    async def models(self) -> list[dict[str, Any]]:
        """Configured aliases, plus the upstream's own list behind a `*` model."""
        listed = [
            {"id": name, "object": "model", "created": 0, "owned_by": "levergate"}
            for name in self.pipeline.models
            if name != WILDCARD
        ]
        wildcard = self.pipeline.models.get(WILDCARD)
        if wildcard is not None:
            # The upstream may not list models; the configured aliases still stand.
            with contextlib.suppress(LevergateError, OSError, ValueError):
                listed.extend(await self.pipeline.upstreams[wildcard.upstream].models())
        return listed

    # ---- the library surface ------------------------------------------------------------

    async def chat(
        self,
        *,
        model: str,
        messages: Sequence[Mapping[str, object]],
        stream: bool = False,
        headers: Mapping[str, str] | None = None,
        **params: Any,
    ) -> dict[str, Any] | AsyncIterator[dict[str, Any]]:
        """`params` are further fields of the OpenAI request body (temperature, max_tokens...)."""
        body = {**params, "model": model, "messages": list(messages), "stream": stream}
        return await self._library_call("chat", body, headers)

    async def complete(
        self,
        *,
        model: str,
        prompt: str | list[str],
        stream: bool = False,
        headers: Mapping[str, str] | None = None,
        **params: Any,
    ) -> dict[str, Any] | AsyncIterator[dict[str, Any]]:
        body = {**params, "model": model, "prompt": prompt, "stream": stream}
        return await self._library_call("completion", body, headers)

    async def embed(
        self,
        *,
        model: str,
        input: str | list[str],  # noqa: A002 - the OpenAI field name
        headers: Mapping[str, str] | None = None,
        **params: Any,
    ) -> dict[str, Any]:
        reply = await self.serve(
            self.make_call("embedding", {**params, "model": model, "input": input}, headers=headers)
        )
        if not isinstance(reply, Completed):
            raise BadRequest("embeddings cannot be streamed")
        return reply.data

    def transport(self) -> httpx.AsyncBaseTransport:
        """An httpx transport that runs this gateway's pipeline in-process, for the OpenAI SDK."""
        from levergate.server.transport import GatewayTransport

        return GatewayTransport(self)

    def httpx2_transport(self) -> httpx2.AsyncBaseTransport:
        """The same for clients on `httpx2` (the anthropic SDK's `http_client` must be one)."""
        from levergate.server.httpx2_transport import Httpx2Transport

        return Httpx2Transport(self)

    def sync_transport(self) -> httpx.BaseTransport:
        """The same for synchronous clients (`openai.OpenAI`, `httpx.Client`): the gateway runs
        on a loop thread the transport owns, started now and closed with the client."""
        from levergate.server.sync_transport import SyncGatewayTransport

        return SyncGatewayTransport(self)

    async def _library_call(
        self, kind: Kind, body: dict[str, Any], headers: Mapping[str, str] | None
    ) -> dict[str, Any] | AsyncIterator[dict[str, Any]]:
        reply = await self.serve(self.make_call(kind, body, headers=headers))
        if isinstance(reply, Completed):
            return reply.data
        return _chunks(reply)


async def _chunks(stream: Stream) -> AsyncIterator[dict[str, Any]]:
    try:
        async for event in stream:
            yield event.json()
    finally:
        await stream.aclose()


async def _drop_usage_chunk(events: EventSource) -> EventSource:
    """Decided on the parsed event, not on its bytes: upstreams write JSON in every spacing
    (`"usage": {` from Python's `json.dumps`), and a usage-only chunk that slips through has
    `choices: []`, which breaks the everyday `chunk.choices[0]` loop. The parse is cached on
    the event, so layers that read it too pay nothing more."""
    async for event in events:
        if is_usage_only(event.json()):
            continue
        yield event


def request_id_for(headers: Mapping[str, str]) -> str:
    """The client's `x-request-id` if it is safe to echo and log, else a fresh random one."""
    asked = headers.get(REQUEST_ID_HEADER)
    if asked is not None and _CLIENT_REQUEST_ID.fullmatch(asked) is not None:
        return asked
    return os.urandom(12).hex()


def _timeout_seconds(text: str, *, limits: RequestLimits) -> float:
    """The client's deadline: garbage and values no answer can meet are a 400 (never a 504 and
    a warning line per request), a value beyond `max_timeout_seconds` is clamped to it."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise BadRequest(f"'{TIMEOUT_HEADER}' must be a finite number of seconds.")
    if value < limits.min_timeout_seconds:
        raise BadRequest(
            f"'{TIMEOUT_HEADER}' must be at least {limits.min_timeout_seconds} seconds."
        )
    return min(value, limits.max_timeout_seconds)
