"""Stream watchers (`Stream.watch`): the layers that only observe a stream are plain calls from
one driving generator, and they must see what an async generator per layer saw — every event
in order, the first one once, how the stream ended (cleanly, by a failure, or by the consumer
closing it, read or not), an event a watcher appends after a clean end, and the usage-chunk
filter applied outside all of them."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from levergate.core.reply import Ended, Event, EventSource, Stream, Watcher


class Log(Watcher):
    def __init__(self, name: str, log: list[str], *, tail: Event | None = None) -> None:
        self.name, self.log, self.tail = name, log, tail
        self.events: list[bytes] = []
        self.firsts = 0
        self.ended: list[tuple[type[BaseException] | None, object]] = []

    def first(self, event: Event) -> None:
        self.firsts += 1

    def each(self, event: Event, handed: float) -> None:
        self.events.append(event.data)

    async def end(self, ended: Ended) -> Event | None:
        self.log.append(self.name)
        error = type(ended.error) if ended.error is not None else None
        self.ended.append((error, ended.usage))
        return self.tail if ended.error is None else None


async def numbers(n: int, *, fail_at: int | None = None, usage: bool = False) -> EventSource:
    for i in range(n):
        if i == fail_at:
            raise ValueError("cut")
        yield Event(b'{"i":%d}' % i)
    if usage:
        yield Event(b'{"choices":[],"usage":{"total_tokens":3}}')


async def drain(stream: Stream) -> list[bytes]:
    return [event.data async for event in stream]


@given(n=st.integers(0, 6), primed=st.booleans(), watchers=st.integers(1, 4))
async def test_every_watcher_sees_every_event_once_and_the_end_once(
    n: int, primed: bool, watchers: int
) -> None:
    log: list[str] = []
    stream = Stream(numbers(n))
    inner = [Log(f"inner{i}", log) for i in range(watchers)]
    for watcher in inner:
        stream = stream.watch(watcher)
    if primed:
        stream = await stream.prime()
    outer = Log("outer", log)
    stream = stream.watch(outer)
    got = [event.data async for event in stream]
    assert got == [b'{"i":%d}' % i for i in range(n)]
    for watcher in [*inner, outer]:
        assert watcher.events == got
        assert watcher.firsts == (1 if n else 0)
        assert watcher.ended == [(None, None)]
    assert log == [w.name for w in [*inner, outer]]  # innermost first


async def test_a_tail_from_a_clean_end_is_sent_and_seen_only_outside() -> None:
    log: list[str] = []
    tail = Event(b'{"choices":[],"usage":{"total_tokens":9}}')
    inner, counting, outer = Log("inner", log), Log("counting", log, tail=tail), Log("outer", log)
    stream = Stream(numbers(2)).watch(inner).watch(counting).watch(outer)
    got = [event.data async for event in stream]
    assert got == [b'{"i":0}', b'{"i":1}', tail.data]
    assert inner.events == counting.events == got[:2]
    assert outer.events == got
    assert outer.ended == [(None, {"total_tokens": 9})]


async def test_a_failure_reaches_every_watcher_and_the_consumer() -> None:
    log: list[str] = []
    first, second = Log("first", log), Log("second", log)
    stream = Stream(numbers(5, fail_at=2)).watch(first).watch(second)
    with pytest.raises(ValueError, match="cut"):
        await drain(stream)
    assert first.events == second.events == [b'{"i":0}', b'{"i":1}']
    assert first.ended == second.ended == [(ValueError, None)]


async def test_a_consumer_that_leaves_ends_every_watcher_read_or_not() -> None:
    for read in (0, 1):
        log: list[str] = []
        watcher = Log("w", log)
        stream = Stream(numbers(5)).watch(watcher)
        if read:
            async for _ in stream:
                break
        await stream.aclose()
        await stream.aclose()  # twice: still told once
        assert watcher.ended == [(GeneratorExit, None)]


async def test_a_failure_before_the_first_event_surfaces_at_prime_and_ends_the_watchers() -> None:
    watcher = Log("w", [])
    with pytest.raises(ValueError, match="cut"):
        await Stream(numbers(3, fail_at=0)).watch(watcher).prime()
    assert watcher.ended == [(ValueError, None)]


async def test_hidden_usage_chunks_are_seen_by_every_watcher_but_not_sent() -> None:
    watcher = Log("w", [])
    stream = Stream(numbers(2, usage=True)).watch(watcher)
    stream.hiding(lambda event: event.json().get("choices") == [])
    got = [event.data async for event in stream]
    assert got == [b'{"i":0}', b'{"i":1}']
    assert len(watcher.events) == 3
    assert watcher.ended == [(None, {"total_tokens": 3})]


@pytest.mark.parametrize("null", [b'"usage":null', b'"usage": null', b'"usage" :null'])
@pytest.mark.parametrize("block", [b'"usage":{"total_tokens":3}', b'"usage" : {"total_tokens":3}'])
async def test_the_usage_block_is_read_past_null_usage_on_every_chunk(
    null: bytes, block: bytes
) -> None:
    """OpenAI's chunks carry `"usage":null` once a stream asked for its usage (the driver skips
    those on the bytes); the block that ends the stream is read in any spacing, and a null one
    after it does not erase it."""

    async def chunks() -> EventSource:
        yield Event(b'{"choices":[{"delta":{"content":"a"}}],' + null + b"}")
        yield Event(b'{"choices":[],' + block + b"}")
        yield Event(b'{"choices":[],' + null + b"}")

    watcher = Log("w", [])
    assert len(await drain(Stream(chunks()).watch(watcher))) == 3
    assert watcher.ended == [(None, {"total_tokens": 3})]


async def test_an_end_that_raises_becomes_the_error_of_the_watchers_outside() -> None:
    class Broken(Watcher):
        async def end(self, ended: Ended) -> None:
            raise RuntimeError("store down")

    outer = Log("outer", [])
    stream = Stream(numbers(1)).watch(Broken()).watch(outer)
    with pytest.raises(RuntimeError, match="store down"):
        await drain(stream)
    assert outer.ended == [(RuntimeError, None)]


async def test_a_stream_is_not_watched_once_it_is_read() -> None:
    stream = Stream(numbers(2)).watch(Log("w", []))
    async for _ in stream:
        break
    with pytest.raises(RuntimeError):
        stream.watch(Log("late", []))
    await stream.aclose()


async def batched(sizes: list[int]) -> AsyncIterator[list[Event]]:
    """Events numbered in order, in lists of `sizes` (an empty one among them)."""
    i = 0
    for size in sizes:
        yield [Event(b'{"i":%d}' % (i + k)) for k in range(size)]
        i += size


@given(
    sizes=st.lists(st.integers(0, 4), max_size=6),
    primed=st.booleans(),
    watched=st.booleans(),
    by_batch=st.booleans(),
)
async def test_a_source_in_batches_is_read_either_way_with_every_event_seen_once(
    sizes: list[int], primed: bool, watched: bool, by_batch: bool
) -> None:
    """A source that yields what arrived together as lists (the upstream client) gives the
    same events, in order, read event by event or in batches (the edge), primed or not, and
    every watcher sees each one once; no batch the edge reads is empty, even when the source
    yields an empty list."""
    stream = Stream(batched(sizes), batched=True)  # type: ignore[arg-type]
    watcher = Log("w", [])
    if watched:
        stream = stream.watch(watcher)
    if primed:
        stream = await stream.prime()
    if by_batch:
        batches = [batch async for batch in stream.batches()]
        assert all(batches)
        got = [event.data for batch in batches for event in batch]
    else:
        got = await drain(stream)
    n = sum(sizes)
    assert got == [b'{"i":%d}' % i for i in range(n)]
    if watched:
        assert watcher.events == got
        assert watcher.firsts == (1 if n else 0)
        assert watcher.ended == [(None, None)]


async def test_a_hidden_usage_chunk_is_taken_out_of_its_batch() -> None:
    usage = Event(b'{"choices":[],"usage":{"total_tokens":3}}')

    async def source() -> AsyncIterator[list[Event]]:
        yield [Event(b'{"i":0}'), usage, Event(b'{"i":1}')]

    watcher = Log("w", [])
    stream = Stream(source(), batched=True).watch(watcher)  # type: ignore[arg-type]
    stream.hiding(lambda event: event.json().get("choices") == [])
    batches = [[event.data for event in batch] async for batch in stream.batches()]
    assert batches == [[b'{"i":0}', b'{"i":1}']]
    assert len(watcher.events) == 3
    assert watcher.ended == [(None, {"total_tokens": 3})]


async def test_a_stream_read_event_by_event_is_not_then_read_in_batches() -> None:
    """An event-by-event reader may hold part of a batch: the rest read in batches would skip
    it. The other way round loses nothing (a batch reader holds whole batches)."""
    stream = Stream(batched([3, 2]), batched=True).watch(Log("w", []))  # type: ignore[arg-type]
    async for _ in stream:
        break
    with pytest.raises(RuntimeError):
        stream.batches()
    await stream.aclose()
    other = Stream(batched([3, 2]), batched=True).watch(Log("w", []))  # type: ignore[arg-type]
    first = await anext(aiter(other.batches()))
    assert len(first) == 3
    assert await drain(other) == [b'{"i":3}', b'{"i":4}']
