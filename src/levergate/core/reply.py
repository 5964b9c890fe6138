"""`Reply`: a completed answer or a stream of events.

A `Stream` owns its resources: connections, permits, cache writes and metrics are settled when
it *closes* (exhausted, failed or `aclose()`d by a disconnecting client), not when the service
call returns. Every layer that wraps a stream does so with `Stream.through`, which guarantees
the inner stream is closed when the outer one is, in that order.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

import orjson

from levergate.core.json_bound import parse_json


class Completed:
    """A whole answer. `raw` is the JSON as received, passed through byte for byte unless a
    layer replaces it; `data` parses it once, on first use.

    A layer that assembles a large answer itself (the embeddings cache: 2,048 vectors, 67 MB)
    gives it as `parts` and its `usage`: the edge sends the parts as they are, in chunks, so
    the whole is never joined (a copy per slow reader, tens of ms of event loop) unless a
    layer reads `raw`, and reading the usage never parses the whole answer again."""

    __slots__ = ("_data", "_parts", "_raw", "_usage", "headers", "status")

    def __init__(
        self,
        raw: bytes | None = None,
        *,
        data: dict[str, Any] | None = None,
        status: int = 200,
        headers: dict[str, str] | None = None,
        usage: dict[str, Any] | None = None,
        parts: list[bytes] | None = None,
    ) -> None:
        if raw is None and data is None and parts is None:
            raise ValueError("Completed needs raw bytes, parts or data")
        self._raw = raw if raw is not None or parts is not None else orjson.dumps(data)
        self._parts = parts
        self._data = data
        self._usage = usage
        self.status = status
        # Extra response headers layers want the client to see (x-levergate-*).
        self.headers: dict[str, str] = headers if headers is not None else {}

    @property
    def raw(self) -> bytes:
        if self._raw is None:
            self._raw = b"".join(self._parts or ())
            self._parts = None
        return self._raw

    @property
    def parts(self) -> list[bytes]:
        """The answer's bytes, in pieces whose concatenation is `raw` (one piece unless a
        layer assembled it from parts and nothing has joined them since)."""
        return self._parts if self._parts is not None else [self.raw]

    @property
    def size(self) -> int:
        return len(self.raw) if self._parts is None else sum(map(len, self._parts))

    @property
    def data(self) -> dict[str, Any]:
        if self._data is None:
            parsed = parse_json(self.raw)
            self._data = parsed if isinstance(parsed, dict) else {"data": parsed}
        return self._data

    @property
    def usage(self) -> dict[str, Any] | None:
        if self._usage is not None:
            return self._usage
        usage = self.data.get("usage")
        return usage if isinstance(usage, dict) else None


class Event:
    """One server-sent event of a stream: its `data` field, raw, parsed on demand."""

    __slots__ = ("_json", "_usage", "data")

    def __init__(self, data: bytes, parsed: dict[str, Any] | None = None) -> None:
        self.data = data
        self._json = parsed
        self._usage: tuple[dict[str, Any] | None] | None = None  # None: not looked for yet

    @classmethod
    def of(cls, obj: dict[str, Any]) -> Event:
        return cls(orjson.dumps(obj), obj)

    def usage(self) -> dict[str, Any] | None:
        """The usage block this event carries, in any JSON spacing, or None. Four layers ask on
        every event, so the answer is kept, and the bytes are parsed only when the key holds an
        object (`"usage": null` rides on every chunk of some upstreams)."""
        if self._usage is not None:
            return self._usage[0]
        found: dict[str, Any] | None = None
        data = self.data
        if b'"usage"' in data:
            at = data.find(b'"usage"')
            if data[at + 7 : at + 16].lstrip(b" \t\r\n:").startswith(b"{"):
                parsed = self.json()
                block = parsed.get("usage")
                if block is None and isinstance(response := parsed.get("response"), dict):
                    # A Responses stream reports usage inside its final `response.*` event.
                    block = response.get("usage")
                found = block if isinstance(block, dict) else None
        self._usage = (found,)
        return found

    def json(self) -> dict[str, Any]:
        if self._json is None:
            try:
                parsed = parse_json(self.data)
            except orjson.JSONDecodeError:
                parsed = {}
            self._json = parsed if isinstance(parsed, dict) else {}
        return self._json


EventSource = AsyncGenerator[Event, None]


class Stream:
    __slots__ = ("_events", "_inner", "headers", "primed")

    def __init__(
        self,
        events: EventSource,
        *,
        headers: dict[str, str] | None = None,
        inner: Stream | None = None,
    ) -> None:
        self._events = events
        self._inner = inner  # the stream `events` reads from, closed after it
        self.headers: dict[str, str] = headers if headers is not None else {}
        # Its first event has already arrived (`prime`): a failure before the first byte can
        # no longer come out of it.
        self.primed = False

    def __aiter__(self) -> AsyncIterator[Event]:
        return self._events

    async def aclose(self) -> None:
        try:
            await self._events.aclose()
        finally:
            if self._inner is not None:
                await self._inner.aclose()

    def through(self, transform: Callable[[EventSource], EventSource]) -> Stream:
        """A new stream: `transform` applied to this one's events. Closing the new stream closes
        the transform's generator first (its `finally` blocks run) and then this stream. The
        transform's generator is iterated directly, one generator per layer: an event crosses
        every layer of the pipeline on its way out, so each level costs once per event."""
        return Stream(transform(self._events), headers=self.headers, inner=self)

    async def prime(self) -> Stream:
        """This stream with its first event already received, so a failure before the first
        byte surfaces here, where a layer can still retry it or send it to a fallback (Retry
        and Fallback call this before handing a stream up). A primed stream is returned as it
        is (Retry under Fallback pulls once); a failure closes the stream before it is raised."""
        if self.primed:
            return self
        try:
            first = await anext(self._events)
        except StopAsyncIteration:
            return self
        except BaseException:
            await self.aclose()
            raise
        primed = self.through(lambda rest: _prepended(first, rest))
        primed.primed = True
        return primed


async def _prepended(first: Event, rest: EventSource) -> EventSource:
    yield first
    async for event in rest:
        yield event


Reply = Completed | Stream
