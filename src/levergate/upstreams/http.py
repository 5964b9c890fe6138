"""`OpenAIUpstream`: the per-endpoint transport service for any OpenAI-compatible base URL.

Bottom of the stack: it turns a `Call` into one HTTP exchange and the response into a `Reply`.
It owns the phase timeouts (connect in the client; time-to-first-byte, idle-between-chunks and
total here), maps every failure onto the `UpstreamError` branch of the exception tree with the
provider's own message, and records in the call's trace how long the gateway waited on the
provider, which is what lets the measurement layer report the gateway's own overhead.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Mapping
from typing import Any, TypeVar

import orjson

from levergate.config import Upstream
from levergate.core.call import Call, Kind, Trace
from levergate.core.quota import Quota
from levergate.core.reply import Completed, Event, EventSource, Reply, Stream
from levergate.errors import (
    UpstreamError,
    UpstreamRejected,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from levergate.protocol.sse import DONE, SSEDecoder
from levergate.upstreams.wire import HttpClient, HttpResponse, TransportFailed

T = TypeVar("T")

PATHS: dict[Kind, str] = {
    "chat": "/chat/completions",
    "completion": "/completions",
    "embedding": "/embeddings",
}


class OpenAIUpstream:
    def __init__(self, settings: Upstream, *, client: HttpClient) -> None:
        self.name = settings.name
        self._settings = settings
        self._client = client
        self._base = settings.base_url.rstrip("/")
        headers = {"content-type": "application/json", **settings.headers}
        if settings.api_key is not None:
            headers["authorization"] = f"Bearer {settings.api_key.get_secret_value()}"
        self._headers = headers

    async def __call__(self, call: Call) -> Reply:
        payload = call.raw
        if call.stream and call.kind != "embedding" and not call.wants_usage_chunk:
            # Always ask for the usage chunk: the gateway measures tokens and cost on every
            # stream. The edge drops it again when the client did not ask for it.
            options = call.body.get("stream_options")
            include = {**(options or {}), "include_usage": True}
            payload = orjson.dumps({**call.body, "stream_options": include})
        elif payload is None:
            payload = orjson.dumps(call.body)
        timeouts = self._settings.timeouts
        deadline = time.monotonic() + timeouts.total
        trace = call.ctx.trace
        trace.upstream = self.name
        trace.upstream_model = call.model
        trace.attempts += 1
        started = time.perf_counter()
        try:
            async with asyncio.timeout(min(timeouts.ttfb, timeouts.total)):
                response = await self._client.request(
                    "POST",
                    self._base + PATHS[call.kind],
                    body=payload,
                    headers=self._headers,
                )
        except TimeoutError:
            trace.upstream_seconds += time.perf_counter() - started
            raise UpstreamTimeout(
                f"upstream '{self.name}' sent no response within {timeouts.ttfb:g}s",
                upstream=self.name,
                code="upstream_timeout",
            ) from None
        except TransportFailed as exc:
            trace.upstream_seconds += time.perf_counter() - started
            raise UpstreamUnavailable(
                f"cannot reach upstream '{self.name}': {exc}", upstream=self.name
            ) from None
        note_ratelimit_headers(response.headers, trace)
        try:
            if response.status >= 400:
                await self._raise_for(response, deadline)
            if call.stream and _is_event_stream(response.headers):
                trace.upstream_seconds += time.perf_counter() - started
                return Stream(self._events(response, trace, deadline))
            raw = await self._bounded(response.read(), deadline)
        except BaseException:
            trace.upstream_seconds += time.perf_counter() - started
            await response.aclose()
            raise
        trace.upstream_seconds += time.perf_counter() - started
        data = _json_object(raw)
        if data is None:
            raise UpstreamUnavailable(
                f"upstream '{self.name}' returned a malformed body", upstream=self.name
            )
        # Parsed once here; the raw bytes still go to the client unchanged.
        return Completed(raw, data=data)

    async def models(self) -> list[dict[str, Any]]:
        """The upstream's own `/models` list, for `--upstream URL` mode."""
        response = await self._client.request(
            "GET", self._base + "/models", body=None, headers=self._headers
        )
        raw = await self._bounded(response.read(), time.monotonic() + self._settings.timeouts.ttfb)
        if response.status >= 400:
            return []
        data = orjson.loads(raw).get("data")
        return [m for m in data if isinstance(m, dict)] if isinstance(data, list) else []

    async def aclose(self) -> None:
        await self._client.aclose()

    async def _events(self, response: HttpResponse, trace: Trace, deadline: float) -> EventSource:
        decoder = SSEDecoder()
        chunks = response.chunks()
        done = False
        try:
            while True:
                waited = time.perf_counter()
                try:
                    chunk = await self._bounded(
                        anext(chunks, None), deadline, limit=self._settings.timeouts.idle
                    )
                finally:
                    trace.upstream_seconds += time.perf_counter() - waited
                if chunk is None:
                    break
                for data in decoder.feed(chunk):
                    if data == DONE:
                        done = True
                        continue
                    if data.startswith(b'{"error"'):
                        raise _stream_error(self.name, data)
                    yield Event(data)
            if not done:
                raise UpstreamUnavailable(
                    f"upstream '{self.name}' ended the stream before it was complete",
                    upstream=self.name,
                    code="stream_interrupted",
                )
        finally:
            await _close_quietly(chunks)
            await response.aclose()

    async def _bounded(
        self, awaitable: Awaitable[T], deadline: float, *, limit: float | None = None
    ) -> T:
        """Await under the phase limit and the exchange's total deadline, whichever is sooner."""
        remaining = deadline - time.monotonic()
        budget = remaining if limit is None else min(limit, remaining)
        try:
            async with asyncio.timeout(max(0.0, budget)):
                result: T = await awaitable
        except TimeoutError:
            what = "total" if limit is None or remaining <= limit else "idle"
            raise UpstreamTimeout(
                f"upstream '{self.name}' exceeded its {what} timeout",
                upstream=self.name,
                code="upstream_timeout",
            ) from None
        except TransportFailed as exc:
            raise UpstreamUnavailable(
                f"upstream '{self.name}' failed while sending its answer: {exc}",
                upstream=self.name,
            ) from None
        return result

    async def _raise_for(self, response: HttpResponse, deadline: float) -> None:
        raw: bytes = await self._bounded(response.read(), deadline)
        message = _error_message(raw) or f"HTTP {response.status}"
        retry_after = retry_after_seconds(response.headers)
        text = f"upstream '{self.name}' answered {response.status}: {message}"
        if response.status < 500:
            raise UpstreamRejected(
                text,
                upstream=self.name,
                upstream_status=response.status,
                code=_error_code(raw),
                retry_after=retry_after,
            )
        raise UpstreamUnavailable(
            text, upstream=self.name, upstream_status=response.status, retry_after=retry_after
        )


def note_ratelimit_headers(headers: Mapping[str, str], trace: Trace) -> None:
    """Parse the provider's `x-ratelimit-*` headers onto the call's record (`Quota`), where the
    balancer reads quota headroom and reset times (on successes as well as on 429s)."""
    trace.quota = Quota.from_headers(headers)


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """`retry-after-ms` (more precise) or `Retry-After` in seconds; HTTP dates are ignored."""
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value:
            try:
                return max(0.0, float(value) / scale)
            except ValueError:
                continue
    return None


def _is_event_stream(headers: Mapping[str, str]) -> bool:
    return headers.get("content-type", "").startswith("text/event-stream")


def _json_object(raw: bytes) -> dict[str, Any] | None:
    try:
        parsed = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return parsed if isinstance(parsed, dict) else None


def _error_object(raw: bytes) -> dict[str, Any]:
    try:
        parsed = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return {}
    error = parsed.get("error") if isinstance(parsed, dict) else None
    if isinstance(error, dict):
        return error
    return {"message": error} if isinstance(error, str) else {}


def _error_message(raw: bytes) -> str:
    message = _error_object(raw).get("message")
    if isinstance(message, str):
        return message
    return raw[:300].decode("utf-8", "replace").strip()


def _error_code(raw: bytes) -> str | None:
    code = _error_object(raw).get("code")
    return code if isinstance(code, str) else None


def _stream_error(name: str, data: bytes) -> UpstreamError:
    return UpstreamUnavailable(
        f"upstream '{name}' reported an error mid-stream: {_error_message(data)}",
        upstream=name,
        code="stream_error",
    )


async def _close_quietly(chunks: AsyncIterator[bytes]) -> None:
    aclose = getattr(chunks, "aclose", None)
    if aclose is not None:
        await aclose()
