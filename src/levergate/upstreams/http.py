"""`OpenAIUpstream`: the per-endpoint transport service for any OpenAI-compatible base URL.

Bottom of the stack: it turns a `Call` into one HTTP exchange and the response into a `Reply`.
It owns the phase timeouts (connect in the client; time-to-first-byte, idle-between-chunks and
total here), maps every failure onto the `UpstreamError` branch of the exception tree with the
provider's own error object, and records in the call's trace how long the gateway waited on the
provider, which is what lets the measurement layer report the gateway's own overhead.

An upstream is not trusted: what it says is scrubbed of the secrets it was given before it goes
anywhere (`Redactor`, levergate/redact.py; its answers and streams too, when it has any secret:
levergate/redact_answers.py), its answer is read up to `response_limits` only (a
whole answer, an error body, one streamed event), the total timeout is checked on every chunk
(a flood of buffered bytes never yields to the event loop, so a timer alone would not fire), and
a stream event that is not a JSON object ends the stream with an error instead of reaching the
client.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import orjson

from levergate.config import UpstreamSettings
from levergate.core.call import Call, Kind, Trace
from levergate.core.json_bound import parse_json
from levergate.core.quota import Quota
from levergate.core.reply import Batches, Completed, Event, EventSource, Reply, Stream
from levergate.core.spans import end as end_attempt
from levergate.errors import (
    UpstreamError,
    UpstreamRejected,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from levergate.protocol.anthropic.extensions import for_openai
from levergate.protocol.sse import DONE, EventTooLarge, SSEDecoder
from levergate.redact import Redactor
from levergate.redact_answers import AnswerScrubber
from levergate.upstreams.passed_headers import HeaderAllowList
from levergate.upstreams.stream_timer import StreamTimer, Watchdog
from levergate.upstreams.wire import HttpClient, HttpResponse, TransportFailed

_TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})

PATHS: dict[Kind, str] = {
    "chat": "/chat/completions",
    "completion": "/completions",
    "embedding": "/embeddings",
    "response": "/responses",
}
# Kinds whose streams take `stream_options.include_usage` (embeddings do not stream; a Responses
# stream reports usage in its `response.completed` event).
_USAGE_OPTION = frozenset({"chat", "completion"})


class OpenAIUpstream:
    # `_events` yields the events of each read together (`Stream(..., batched=True)`); a
    # subclass whose `_events` yields events one by one says False.
    events_batched = True

    def __init__(self, settings: UpstreamSettings, *, client: HttpClient) -> None:
        self.name = settings.name
        self._settings = settings
        self._client = client
        self._base = settings.base_url.rstrip("/")
        headers = {"content-type": "application/json", **settings.headers}
        if settings.api_key is not None:
            headers["authorization"] = f"Bearer {settings.api_key.get_secret_value()}"
        self._headers = headers
        self._passed = HeaderAllowList(settings.response_headers)
        # The secrets this upstream is sent (keys, URL credentials, credential headers): the
        # ones it could echo back.
        self._redact = Redactor.of(settings)
        self._scrub = AnswerScrubber.of(self._redact)
        self._limits = settings.response_limits
        # The time-to-first-byte and total timeouts of every exchange read whole (a stream's
        # events have a `StreamTimer` each), on one loop timer.
        self._watch = Watchdog()

    @property
    def client(self) -> HttpClient:
        """The HTTP client under this upstream (read for its wire counts: `wire.WireCounts`)."""
        return self._client

    def _request(self, call: Call) -> tuple[str, bytes]:
        """The URL and body of the upstream request for `call` (a subclass speaking another
        wire format translates here)."""
        if call.ctx.extensions:
            # Another protocol's features (an Anthropic request): hints dropped, a 400 for
            # what the OpenAI API cannot express (protocol/anthropic/extensions.py).
            call = for_openai(call, upstream=self.name)
        payload = call.raw
        if call.stream and call.kind in _USAGE_OPTION and not call.wants_usage_chunk:
            # Always ask for the usage chunk: the gateway measures tokens and cost on every
            # stream. The edge drops it again when the client did not ask for it.
            options = call.body.get("stream_options")
            include = {**(options or {}), "include_usage": True}
            payload = orjson.dumps({**call.body, "stream_options": include})
        elif payload is None:
            payload = orjson.dumps(call.body)
        return self._base + PATHS[call.kind], payload

    def _note_quota(self, headers: Mapping[str, str], trace: Trace) -> None:
        note_ratelimit_headers(headers, trace)

    def _completed(self, raw: bytes, data: dict[str, Any], *, headers: dict[str, str]) -> Completed:
        # Parsed once here; the raw bytes still go to the client unchanged.
        return Completed(raw, data=data, headers=headers)

    async def __call__(self, call: Call) -> Reply:
        url, payload = self._request(call)
        timeouts = self._settings.timeouts
        deadline = time.monotonic() + timeouts.total
        trace = call.ctx.trace
        trace.upstream = self.name
        trace.upstream_model = model = call.model
        trace.attempts += 1
        headers, attempt = self._headers, None
        started = time.perf_counter()
        if (spans := trace.spans) is not None:  # tracing on: this attempt's span, sent upstream
            headers = headers.copy()  # (`{**headers, ...}` was ~700 instructions more)
            attempt, headers["traceparent"] = spans.sent(self.name, model, started)
            if spans.state is not None:  # the client's, with the trace it belongs to
                headers["tracestate"] = spans.state
        try:
            response = await self._send(url, payload, headers, deadline=deadline)
        except UpstreamError as exc:
            trace.upstream_seconds += time.perf_counter() - started
            if attempt is not None:
                end_attempt(attempt, exc)
            raise
        self._note_quota(response.headers, trace)
        passed = self._passed.pick(response.headers, redact=self._redact)
        try:
            if response.status >= 400:
                await self._raise_for(response, deadline)
            if call.stream and _is_event_stream(response.headers):
                trace.upstream_seconds += time.perf_counter() - started
                events = self._events(response, trace, deadline, call)
                return Stream(events, headers=passed, batched=self.events_batched)
            raw = await self._read(response, deadline, limit=self._limits.body_bytes)
        except BaseException as exc:
            trace.upstream_seconds += time.perf_counter() - started
            if attempt is not None:
                end_attempt(attempt, exc)
            await response.aclose()
            if isinstance(exc, UpstreamError):
                exc.passed_headers = passed
            raise
        trace.upstream_seconds += time.perf_counter() - started
        if attempt is not None:
            end_attempt(attempt)
        reply = self._completed(raw, self._object(raw), headers=passed)
        return reply if self._scrub is None else self._scrub.completed(reply)

    async def _send(
        self, url: str, payload: bytes, headers: Mapping[str, str] | None = None, *,
        deadline: float,
    ) -> HttpResponse:  # fmt: skip
        """POST `payload` to `url`: the response once its head arrived within the
        time-to-first-byte timeout (and the exchange's total `deadline`, on `time.monotonic`),
        else `UpstreamTimeout` / `UpstreamUnavailable`."""
        timeouts = self._settings.timeouts
        sent = self._headers if headers is None else headers
        head_by = min(time.monotonic() + timeouts.ttfb, deadline)
        try:
            return await self._watch.read(
                self._client.request("POST", url, body=payload, headers=sent), head_by
            )
        except TimeoutError:
            raise self._timed_out(f"sent no response within {timeouts.ttfb:g}s") from None
        except TransportFailed as exc:
            raise UpstreamUnavailable(
                f"cannot reach upstream '{self.name}': {self._redact(str(exc))}",
                upstream=self.name,
            ) from None

    async def _post_json(self, path: str, payload: bytes) -> dict[str, Any]:
        """A whole JSON object from `POST path` (a side request such as Anthropic's
        count_tokens), under the same timeouts, caps and error tree as an answer."""
        deadline = time.monotonic() + self._settings.timeouts.total
        response = await self._send(self._base + path, payload, deadline=deadline)
        try:
            if response.status >= 400:
                await self._raise_for(response, deadline)
            raw = await self._read(response, deadline, limit=self._limits.body_bytes)
        except BaseException:
            await response.aclose()
            raise
        return self._object(raw)

    def _object(self, raw: bytes) -> dict[str, Any]:
        data = json_object(raw)
        if data is None:
            raise UpstreamUnavailable(
                f"upstream '{self.name}' returned a malformed body", upstream=self.name
            )
        return data

    async def models(self) -> list[dict[str, Any]]:
        """The upstream's own `/models` list, for `--upstream URL` mode."""
        return await self._listed("/models")

    async def _listed(self, path: str) -> list[dict[str, Any]]:
        """The objects of a `{"data": [...]}` list the upstream serves at `path` ([] for an
        error or anything else)."""
        response = await self._client.request(
            "GET", self._base + path, body=None, headers=self._headers
        )
        deadline = time.monotonic() + self._settings.timeouts.ttfb
        raw = await self._read(response, deadline, limit=self._limits.body_bytes)
        body = json_object(raw) if response.status < 400 else None
        data = body.get("data") if body is not None else None
        found = [m for m in data if isinstance(m, dict)] if isinstance(data, list) else []
        return self._redact.scrub(found)  # type: ignore[no-any-return]

    async def aclose(self) -> None:
        self._watch.close()
        await self._client.aclose()

    async def _events(
        self,
        response: HttpResponse,
        trace: Trace,
        deadline: float,
        call: Call,
    ) -> Batches | EventSource:
        """The events of each read, together (core/reply.py). A chat or completions stream is
        complete at `[DONE]`; a Responses stream (which sends none) at its terminal
        `response.completed|incomplete|failed` event."""
        responses = call.kind == "response"
        decoder = SSEDecoder(max_event_bytes=self._limits.event_bytes)
        chunks = response.chunks()
        timer = StreamTimer(idle=self._settings.timeouts.idle, deadline=deadline)
        done = False
        # Secrets this upstream was given, cut out of its events (levergate/redact_answers.py).
        window = self._scrub.window() if self._scrub is not None else None
        try:
            until = perf_deadline(deadline)
            while (chunk := await self._next_chunk(chunks, trace, until, timer)) is not None:
                try:  # `_decoded`, inline: once a chunk of every stream
                    decoded = decoder.feed(chunk)
                except EventTooLarge as exc:
                    raise self._event_too_large(exc) from None
                batch: list[Event] = []
                for data in decoded:
                    if data == DONE:
                        done = True
                        continue
                    if data[:1] == b"{" and data[-1:] == b"}" and not data.startswith(_ERROR):
                        # The shape of a JSON object: passed on unparsed (a parse per event
                        # would cost ~2 us, a tenth of a stream's gateway CPU; the edge and
                        # the usage filter parse the few events they need).
                        event = Event(data)
                        if responses and not done:
                            done = _is_terminal(event)
                    else:
                        try:
                            event = self._parsed_event(data)
                        except UpstreamError:
                            if batch:  # the events before it still go out first
                                yield batch
                            raise
                        done = done or (responses and event.json().get("type") in _TERMINAL)
                    if window is None:
                        batch.append(event)
                    else:
                        batch += window.feed(event)
                if batch:
                    yield batch
            if window is not None and (rest := window.flush()):
                yield rest
            if not done:
                raise UpstreamUnavailable(
                    f"upstream '{self.name}' ended the stream before it was complete",
                    upstream=self.name,
                    code="stream_interrupted",
                )
        finally:
            timer.close()
            await close_chunks(chunks)
            await response.aclose()

    def _parsed_event(self, data: bytes) -> Event:
        """An event whose bytes do not look like a plain JSON object: parsed, and refused
        unless it is one; an `error` event ends the stream with the upstream's error."""
        parsed = event_object(data, upstream=self.name)
        if parsed.get("error") is not None:
            raise self._stream_error(parsed)
        return Event(data, parsed)

    async def _next_chunk(
        self, chunks: AsyncIterator[bytes], trace: Trace, until: float, timer: StreamTimer
    ) -> bytes | None:
        """A stream body's next chunk (None at its end) under the idle and total timeouts,
        the wait counted as upstream time. `until` is the total deadline on `perf_counter`'s
        scale (`perf_deadline`), so one clock read after the wait serves both."""
        waited = time.perf_counter()
        try:
            chunk = await timer.read(anext(chunks, None))
        except TimeoutError:
            raise self._timed_out(f"exceeded its {timer.expired or 'total'} timeout") from None
        except TransportFailed as exc:
            raise self._failed_while_sending(exc) from None
        finally:
            now = time.perf_counter()
            trace.upstream_seconds += now - waited
        if chunk is not None and now >= until:
            raise self._timed_out("exceeded its total timeout")
        return chunk

    def _decoded(self, decoder: SSEDecoder, chunk: bytes) -> list[bytes]:
        try:
            return decoder.feed(chunk)
        except EventTooLarge as exc:
            raise self._event_too_large(exc) from None

    def _event_too_large(self, exc: EventTooLarge) -> UpstreamUnavailable:
        return UpstreamUnavailable(
            f"upstream '{self.name}' sent a stream event larger than {exc.limit} bytes",
            upstream=self.name,
            code="upstream_event_too_large",
        )

    async def _read(self, response: HttpResponse, deadline: float, *, limit: int) -> bytes:
        """The whole body, under the exchange's total `deadline` (on `time.monotonic`); beyond
        `limit` bytes a 502 (the rest is never read: the connection is dropped)."""
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            await response.aclose()
            raise self._too_large(limit)
        raw, cut = await self._read_at_most(response, deadline, limit=limit)
        if cut:
            raise self._too_large(limit)
        return raw

    async def _read_at_most(
        self, response: HttpResponse, deadline: float, *, limit: int
    ) -> tuple[bytes, bool]:
        """At most `limit` bytes of the body, and whether there was more, under the exchange's
        total `deadline` (no idle timeout here: a body is read as one wait)."""
        # A client that has the whole body already (`whole()`, H1Client's: a small answer came
        # with its head) gives it without a wait, so with nothing to time; the deadline and
        # the limit still hold.
        whole = getattr(response, "whole", None)
        if whole is not None and (raw := whole()) is not None:
            self._check_deadline(deadline)
            return (raw[:limit], True) if len(raw) > limit else (raw, False)
        try:
            return await self._watch.read(self._collect(response, deadline, limit=limit),
                                          deadline)  # fmt: skip
        except TimeoutError:
            raise self._timed_out("exceeded its total timeout") from None
        except TransportFailed as exc:
            raise self._failed_while_sending(exc) from None

    async def _collect(
        self, response: HttpResponse, deadline: float, *, limit: int
    ) -> tuple[bytes, bool]:
        parts: list[bytes] = []
        size = 0
        cut = False
        chunks = response.chunks()
        try:
            async for chunk in chunks:
                # Buffered chunks come without a pause, where no timer can fire: check here.
                self._check_deadline(deadline)
                if size + len(chunk) > limit:
                    parts.append(chunk[: limit - size])
                    cut = True
                    break
                parts.append(chunk)
                size += len(chunk)
        finally:
            await close_chunks(chunks)
            await response.aclose()
        return (parts[0] if len(parts) == 1 else b"".join(parts)), cut

    def _too_large(self, limit: int) -> UpstreamError:
        return UpstreamUnavailable(
            f"upstream '{self.name}' sent an answer larger than {limit} bytes",
            upstream=self.name,
            code="upstream_response_too_large",
        )

    def _check_deadline(self, deadline: float) -> None:
        if time.monotonic() >= deadline:
            raise self._timed_out("exceeded its total timeout")

    def _timed_out(self, what: str) -> UpstreamTimeout:
        return UpstreamTimeout(f"upstream '{self.name}' {what}", upstream=self.name,
                               code="upstream_timeout")  # fmt: skip

    def _failed_while_sending(self, exc: TransportFailed) -> UpstreamUnavailable:
        return UpstreamUnavailable(
            f"upstream '{self.name}' failed while sending its answer: {self._redact(str(exc))}",
            upstream=self.name,
        )

    async def _raise_for(self, response: HttpResponse, deadline: float) -> None:
        limit = self._limits.error_body_bytes
        raw, _ = await self._read_at_most(response, deadline, limit=limit)
        status = response.status
        provider = self._redact.scrub(_error_object(raw)) or None
        message = provider.get("message") if provider else None
        if not isinstance(message, str):
            message = self._redact(raw[:300].decode("utf-8", "replace").strip()) or f"HTTP {status}"
        text = f"upstream '{self.name}' answered {status}: {message}"
        if status in _KEY_FAULTS:
            # The gateway's own credentials were refused: the caller can do nothing about it,
            # and the provider's text describes the gateway's key. It goes to the log only.
            provider = {**_KEY_FAULT, "code": f"upstream_{status}"}
        retry_after = retry_after_seconds(response.headers)
        if status < 500:
            raise UpstreamRejected(
                text,
                upstream=self.name,
                upstream_status=status,
                code=self._redact.scrub(_error_code(raw)),
                retry_after=retry_after,
                provider_error=provider,
            )
        raise UpstreamUnavailable(
            text,
            upstream=self.name,
            upstream_status=status,
            retry_after=retry_after,
            provider_error=provider,
        )

    def _stream_error(self, parsed: dict[str, Any]) -> UpstreamError:
        error = parsed["error"]
        provider = self._redact.scrub(error if isinstance(error, dict) else {"message": error})
        message = provider.get("message")
        return UpstreamUnavailable(
            f"upstream '{self.name}' reported an error mid-stream: {message}",
            upstream=self.name,
            code="stream_error",
            provider_error={"code": "stream_error", **provider},
        )


_ERROR = b'{"error"'
_KEY_FAULTS = frozenset({401, 403})
_KEY_FAULT = {
    "message": "The upstream refused the gateway's credentials.",
    "type": "upstream_error",
    "param": None,
}


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


def json_object(raw: bytes) -> dict[str, Any] | None:
    """An upstream body parsed under the gateway's bounds when it is a JSON object, else None."""
    try:
        parsed = parse_json(raw)
    except orjson.JSONDecodeError:
        return None
    return parsed if isinstance(parsed, dict) else None


def event_object(data: bytes, *, upstream: str) -> dict[str, Any]:
    """One upstream stream event's JSON object. Anything else (not JSON, nested past the bound,
    an array, a bare string) is `malformed_stream_event`, whichever protocol the upstream
    speaks: both stream readers (this module's and upstreams/anthropic.py) call this one guard,
    so a bad event is refused the same way everywhere."""
    parsed = json_object(data)
    if parsed is None:
        raise UpstreamUnavailable(
            f"upstream '{upstream}' sent a stream event that is not a JSON object",
            upstream=upstream,
            code="malformed_stream_event",
        )
    return parsed


def _error_object(raw: bytes) -> dict[str, Any]:
    try:
        parsed = parse_json(raw)
    except orjson.JSONDecodeError:
        return {}
    error = parsed.get("error") if isinstance(parsed, dict) else None
    if isinstance(error, dict):
        return error
    return {"message": error} if isinstance(error, str) else {}


def _error_code(raw: bytes) -> str | None:
    code = _error_object(raw).get("code")
    return code if isinstance(code, str) else None


async def close_chunks(chunks: AsyncIterator[bytes]) -> None:
    aclose = getattr(chunks, "aclose", None)
    if aclose is not None:
        await aclose()


def _is_terminal(event: Event) -> bool:
    """The last event of a Responses stream (checked on the bytes first: one parse per stream)."""
    data = event.data
    if (  # `find`, not `in`: core/reply.py's docstring
        data.find(b"response.completed") < 0
        and data.find(b"response.incomplete") < 0
        and data.find(b"response.failed") < 0
    ):
        return False
    return event.json().get("type") in _TERMINAL


def perf_deadline(deadline: float) -> float:
    """A deadline on `time.monotonic`'s scale moved to `time.perf_counter`'s, once a stream."""
    return deadline - time.monotonic() + time.perf_counter()
