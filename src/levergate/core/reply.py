"""`Reply`: a completed answer or a stream of events.

A `Stream` owns its resources: connections, permits, cache writes and metrics are settled when
it *closes* (exhausted, failed or `aclose()`d by a disconnecting client), not when the service
call returns. A layer that only observes a stream (a permit to release, a latency to record,
usage to read) does so with `Stream.watch` and a `Watcher`: plain calls made by the stream's one
driving generator, so an event crosses one generator however many layers watch it, and a layer
pays per event only for the hooks it has. A layer that changes the events wraps the stream with
`Stream.through`, which guarantees the inner stream is closed when the outer one is, in that
order.

A source may yield lists of the events that arrived together (`Stream(..., batched=True)`: the
upstream client, the events of one read of the socket), and a consumer that writes what arrived
together at once reads `Stream.batches()` (the edge): the watchers' calls are still per event,
but the generators between the two, the framing and the write are paid once a batch, not once
an event (issue 22: a 16-token stream from a fast upstream arrives in one or two reads). Read
event by event (`async for`), a stream hands on its batches' events one by one.

Per-event byte tests use `data.find(needle) >= 0`, not `needle in data`: on CPython 3.11 a
bytes `in` first tries the needle as an integer and builds and clears a TypeError, ~1,000 more
instructions a test (callgrind), and a stream makes a few tests per event (issue 22).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any, NoReturn, cast

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
        # Without parts the bytes are `_raw` already (a whole answer's `size` is read on every
        # request: `raw`'s property is a call more).
        parts = self._parts
        return len(self._raw or b"") if parts is None else sum(map(len, parts))

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
        at = data.find(b'"usage"')  # `find`, not `in`: the module's docstring
        if at >= 0 and data[at + 7 : at + 16].lstrip(b" \t\r\n:").startswith(b"{"):
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
# Lists of the events that arrived together: a batched source (`Stream`), or `Stream.batches`.
Batches = AsyncGenerator[list[Event], None]


class Ended:
    """What a watched stream's one driver saw, for its watchers: the last usage block, every
    event (when a watcher `keeps` them), whether an event was handed on, the time the consumer
    held the events (when a watcher reads `each`'s hand-off times), and how it ended: `error`
    None when cleanly, else the failure, or GeneratorExit when the consumer closed it."""

    __slots__ = ("consumer_seconds", "error", "events", "sent", "usage")

    def __init__(self, events: list[Event] | None) -> None:
        self.events = events
        self.usage: dict[str, Any] | None = None
        self.error: BaseException | None = None
        self.sent = False
        self.consumer_seconds = 0.0


class Watcher:
    """A layer's view of a stream it hands up (`Stream.watch`): plain calls from the stream's
    one driving generator, instead of an async generator per layer that every event crosses
    (issue 22: five of them were ~25 Python calls a chunk). A watcher pays per event only for
    what it overrides: `first` sees the first event before it is handed on; `each` every event
    after it was (with `time.perf_counter()` at the hand-off); `end` how the stream ended, once,
    innermost watcher first, and after a clean end it may return one more event to send, which
    the watchers outside it see."""

    __slots__ = ()
    keeps = False  # wants every event in `Ended.events`

    def first(self, event: Event) -> None:
        """The first event, before it is handed on."""

    def each(self, event: Event, handed: float) -> None:
        """Every event, after it was handed on at `handed` (`time.perf_counter()`)."""

    async def end(self, ended: Ended) -> Event | None:
        """The stream ended (`ended.error`); after a clean end, an event to append, or None."""
        del ended
        return None


def _overrides(watcher: Watcher, name: str) -> bool:
    return getattr(type(watcher), name) is not getattr(Watcher, name)


class Stream:
    """A stream of events that owns its resources. Layers observe it with `watch` (plain calls,
    one driving generator for every watcher between two transforms) and change it with `through`
    (a generator of their own); `prime` holds its first events in that same generator. It is
    read event by event (`async for`) or in batches (`batches`), not both: a consumer that
    began event by event may hold part of a batch."""

    __slots__ = ("_batched", "_driver", "_each", "_ended", "_hidden", "_inner", "_priming",
                 "_read", "_source", "_watchers", "headers", "primed")  # fmt: skip

    def __init__(
        self,
        events: EventSource | Batches,
        *,
        headers: dict[str, str] | None = None,
        inner: Stream | None = None,
        batched: bool = False,
    ) -> None:
        self._source = events
        # `events` yields lists of the events that arrived together, not events.
        self._batched = batched
        self._inner = inner  # the stream `events` reads from, closed after it
        self.headers: dict[str, str] = headers if headers is not None else {}
        # Its first event has already arrived (`prime`): a failure before the first byte can
        # no longer come out of it.
        self.primed = False
        self._watchers: list[Watcher] = []
        self._hidden: Callable[[Event], bool] | None = None
        self._driver: Batches | None = None  # `_drive`, once primed or read
        self._each: EventSource | None = None  # the events one by one, once read that way
        self._priming = False  # `prime` is pulling the first batch out of `_drive`
        self._read = False  # a consumer has it: no more watchers
        self._ended: Ended | None = None  # set once the watchers were told the end

    def __aiter__(self) -> AsyncIterator[Event]:
        self._read = True
        each = self._each
        if each is None:
            if self._driver is None and not self._watchers and self._hidden is None:
                # Nothing to drive: the source's own events.
                plain = self._source
                each = (
                    _flat(cast("Batches", plain)) if self._batched else cast("EventSource", plain)
                )
            else:
                each = _flat(self.batches())
            self._each = each
        return each

    def batches(self) -> AsyncIterator[list[Event]]:
        """The events in lists of those that arrived together, none empty, with every watcher's
        calls made (the edge's read: one frame and one write a list)."""
        if self._each is not None:
            raise RuntimeError("a stream read event by event is not read in batches")
        self._read = True
        if self._driver is None:
            self._driver = self._drive()
        return self._driver

    async def aclose(self) -> None:
        try:
            try:
                if self._each is not None and self._each is not self._source:
                    await self._each.aclose()
                if self._driver is not None:
                    await self._driver.aclose()
                if self._ended is None and self._watchers:  # never iterated: still settled
                    with contextlib.suppress(GeneratorExit):
                        await self._end_all(0, Ended(None), GeneratorExit())
            finally:
                await self._source.aclose()
        finally:
            if self._inner is not None:
                await self._inner.aclose()

    def through(self, transform: Callable[[EventSource], EventSource]) -> Stream:
        """A new stream: `transform` applied to this one's events. Closing the new stream closes
        the transform's generator first (its `finally` blocks run) and then this stream."""
        events = self.__aiter__()
        return Stream(transform(events), headers=self.headers, inner=self)  # type: ignore[arg-type]

    def watch(self, watcher: Watcher) -> Stream:
        """This stream, `watcher` outside the ones it has (see `Watcher`)."""
        self._unread()
        self._watchers.append(watcher)
        return self

    def hiding(self, hidden: Callable[[Event], bool]) -> Stream:
        """This stream without the events that carry a usage block and `hidden` says to drop,
        after every watcher saw them: the outermost filter, at no cost for the other events."""
        self._unread()
        self._hidden = hidden
        return self

    def _unread(self) -> None:
        if self._read:
            raise RuntimeError("a stream is watched before it is read")

    async def prime(self) -> Stream:
        """This stream with its first events already received, so a failure before the first
        byte surfaces here, where a layer can still retry it or send it to a fallback (Retry
        and Fallback call this before handing a stream up). A primed stream is returned as it
        is (Retry under Fallback pulls once); a failure closes the stream before it is raised.
        The events wait in the driving generator, which hands them on again to the first read."""
        if self.primed:
            return self
        if self._read:  # a consumer iterates it already: primed as a stream of the rest
            return await Stream(_rest(self.__aiter__()), headers=self.headers, inner=self).prime()
        if self._driver is None:
            self._driver = self._drive()
        self._priming = True
        try:
            await anext(self._driver)
        except StopAsyncIteration:  # nothing came: the watchers were told; later ones start anew
            return Stream(_exhausted(), headers=self.headers, inner=self)
        except BaseException:
            await self.aclose()
            raise
        self.primed = True
        return self

    async def _drive(self) -> Batches:
        """Every watcher's calls around each batch of events, in one generator."""
        watchers = self._watchers
        ended = Ended([] if any(w.keeps for w in watchers) else None)
        eaches: list[Callable[[Event, float], None]]
        eaches = [w.each for w in watchers if _overrides(w, "each")]
        firsts = [w.first for w in watchers if _overrides(w, "first")]
        hidden, clock, batched = self._hidden, time.perf_counter, self._batched
        try:
            async for item in self._source:
                batch: list[Event] = item if batched else [item]  # type: ignore[assignment,list-item]
                if not batch:
                    continue
                if firsts:
                    for first in firsts:
                        first(batch[0])
                    firsts = []
                if self._priming:
                    self._priming, seen = False, len(watchers)
                    yield batch  # to `prime`; the next read is the consumer's first
                    eaches, hidden = self._primed(batch[0], seen, ended)
                if ended.events is not None:
                    ended.events += batch
                sent = _usage_of(batch, ended, hidden)
                if not eaches:
                    if sent:
                        ended.sent = True
                        yield sent
                    continue
                handed = clock()
                if sent:
                    ended.sent = True
                    yield sent
                    ended.consumer_seconds += clock() - handed
                for event in batch:
                    for each in eaches:
                        each(event, handed)
        except BaseException as exc:
            await self._end_all(0, ended, exc)
        self._ended = ended
        for at, watcher in enumerate(watchers):
            try:
                tail = await watcher.end(ended)
            except BaseException as exc:
                await self._end_all(at + 1, ended, exc)
            if tail is None:
                continue
            if ended.events is not None:
                ended.events.append(tail)
            ended.usage = tail.usage() or ended.usage
            handed = clock()
            if hidden is None or tail.usage() is None or not hidden(tail):
                ended.sent = True
                try:
                    yield [tail]
                except BaseException as exc:
                    await self._end_all(at + 1, ended, exc)
                ended.consumer_seconds += clock() - handed
            for outer in watchers[at + 1 :]:
                outer.each(tail, handed)

    def _primed(
        self, event: Event, seen: int, ended: Ended
    ) -> tuple[list[Callable[[Event, float], None]], Callable[[Event], bool] | None]:
        """After `prime`: the watchers added since see `event` as their first, and the driver
        takes up every watcher's hooks and the filter."""
        watchers = self._watchers
        for watcher in watchers[seen:]:
            watcher.first(event)
        if ended.events is None and any(w.keeps for w in watchers):
            ended.events = []
        return [w.each for w in watchers if _overrides(w, "each")], self._hidden

    async def _end_all(self, start: int, ended: Ended, error: BaseException) -> NoReturn:
        """Every watcher from `start` out told the stream ended by `error` (one an `end`
        raises takes its place for the watchers outside), then the last error raised."""
        self._ended = ended
        for watcher in self._watchers[start:]:
            ended.error = error
            try:
                await watcher.end(ended)
            except BaseException as exc:
                error = exc
        raise error


def _usage_of(
    batch: list[Event], ended: Ended, hidden: Callable[[Event], bool] | None
) -> list[Event]:
    """`batch` without the events `hidden` drops; `ended.usage` the last usage block in it."""
    sent = batch
    for event in batch:
        # `usage()`'s own first tests, inline: most events carry none, or carry `"usage":null`
        # (OpenAI's chunks do, once a stream asked for its usage).
        data = event.data
        if (
            (at := data.find(b'"usage"')) >= 0
            and data[at + 7 : at + 12] != b":null"
            and (found := event.usage()) is not None
        ):
            ended.usage = found
            if hidden is not None and hidden(event):
                sent = [e for e in sent if e is not event]
    return sent


async def _flat(batches: AsyncIterator[list[Event]]) -> EventSource:
    async for batch in batches:
        for event in batch:
            yield event


async def _rest(events: AsyncIterator[Event]) -> EventSource:
    async for event in events:
        yield event


async def _exhausted() -> EventSource:
    return
    yield  # an async generator that yields nothing


Reply = Completed | Stream
