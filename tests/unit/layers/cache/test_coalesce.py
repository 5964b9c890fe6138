"""Single flight: identical requests in flight go upstream once; every waiter gets the answer."""

from __future__ import annotations

import asyncio

import pytest

from levergate.core.call import CacheOutcome, CacheResult
from levergate.core.reply import Completed, Stream
from levergate.errors import UpstreamUnavailable
from levergate.layers.cache.entries import CACHE_HEADER
from levergate.testing import FakeUpstream, ManualClock, sample_value
from tests.unit.layers.cache.helpers import Routed, chat, drain, exact_cache, text_of


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_identical_whole_requests_in_flight_go_upstream_once() -> None:
    gate = asyncio.Event()
    upstream = FakeUpstream(gate=gate)
    cache, stats = exact_cache(upstream)
    tasks = [asyncio.create_task(cache(chat())) for _ in range(10)]
    await settle()
    gate.set()
    replies = await asyncio.gather(*tasks)
    assert len(upstream.calls) == 1
    outcomes = sorted(r.headers[CACHE_HEADER] for r in replies)
    assert outcomes == ["coalesced"] * 9 + ["miss"]
    assert len({r.raw for r in replies if isinstance(r, Completed)}) == 1
    assert sample_value(stats.lookups, "exact", "coalesced") == 9


async def test_a_coalesced_request_knows_the_model_that_answered_the_one_it_shared() -> None:
    gate = asyncio.Event()
    cache, _ = exact_cache(Routed(gate=gate))
    calls = [chat(model="auto", stream=i == 1) for i in range(3)]
    tasks = [asyncio.create_task(cache(call)) for call in calls]
    await settle()
    gate.set()
    replies = await asyncio.gather(*tasks)
    await drain(replies[1])
    leader, *followers = calls
    assert leader.ctx.trace.cache == CacheResult("exact", CacheOutcome.MISS)
    shared = CacheResult("exact", CacheOutcome.COALESCED, alias="mini", upstream_model="mini-2024")
    assert [f.ctx.trace.cache for f in followers] == [shared, shared]


async def test_streaming_waiters_share_one_stream_and_late_joiners_get_it_all() -> None:
    gate = asyncio.Event()
    upstream = FakeUpstream(gate=gate)
    cache, _ = exact_cache(upstream)
    first = await asyncio.wait_for(_started(cache, gate), 5)
    assert isinstance(first, Stream)
    iterator = aiter(first)
    gate.set()
    head = [(await anext(iterator)).json() for _ in range(3)]
    gate.clear()
    late = asyncio.create_task(drain(await cache(chat(stream=True))))
    whole = asyncio.create_task(cache(chat()))
    await settle()
    gate.set()
    rest = [event.json() async for event in iterator]
    await first.aclose()
    chunks = head + rest
    assert await late == chunks
    answer = await whole
    assert isinstance(answer, Completed)
    assert answer.headers[CACHE_HEADER] == "coalesced"
    assert answer.data["choices"][0]["message"]["content"] == text_of(chunks)
    assert len(upstream.calls) == 1
    assert upstream.served_chunks == 4


async def _started(cache: object, gate: asyncio.Event) -> object:
    """The leader's stream, once the upstream has answered (the gate holds only the chunks)."""
    task = asyncio.create_task(cache(chat(stream=True)))  # type: ignore[operator]
    await settle()
    if not task.done():
        gate.set()
        reply = await task
        gate.clear()
        return reply
    return await task


async def test_a_failure_reaches_every_waiter_once_and_is_not_retried() -> None:
    gate = asyncio.Event()
    upstream = FakeUpstream(gate=gate, default=UpstreamUnavailable("boom"))
    cache, _ = exact_cache(upstream)
    tasks = [asyncio.create_task(cache(chat())) for _ in range(5)]
    await settle()
    gate.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(isinstance(r, UpstreamUnavailable) for r in results)
    assert len(upstream.calls) == 1
    # The flight is over: the next request starts afresh.
    with pytest.raises(UpstreamUnavailable):
        await cache(chat())
    assert len(upstream.calls) == 2


async def test_a_stream_failure_reaches_every_reader_and_nothing_is_stored() -> None:
    upstream = FakeUpstream(cut_after=2)
    cache, _ = exact_cache(upstream)
    first = await cache(chat(stream=True))
    second = await cache(chat(stream=True))
    assert second.headers[CACHE_HEADER] == "coalesced"
    for reply in (first, second):
        with pytest.raises(UpstreamUnavailable):
            await drain(reply)
    assert len(upstream.calls) == 1
    assert (await cache(chat())).headers[CACHE_HEADER] == "miss"


async def test_the_leader_leaving_does_not_end_the_others_stream() -> None:
    upstream = FakeUpstream()
    cache, _ = exact_cache(upstream)
    leader = await cache(chat(stream=True))
    follower = await cache(chat(stream=True))
    assert isinstance(leader, Stream)
    async for _ in leader:
        break
    await leader.aclose()
    chunks = await drain(follower)
    assert text_of(chunks) == "Paris is the capital."
    assert upstream.closed == 1
    # It completed cleanly, so it was stored.
    assert (await cache(chat())).headers[CACHE_HEADER] == "hit"


async def test_when_every_reader_leaves_the_upstream_stream_is_closed() -> None:
    gate = asyncio.Event()
    upstream = FakeUpstream(gate=gate)
    cache, _ = exact_cache(upstream)
    first = await asyncio.wait_for(_started(cache, gate), 5)
    second = await cache(chat(stream=True))
    assert isinstance(first, Stream)
    assert isinstance(second, Stream)
    reading = asyncio.ensure_future(anext(aiter(first)))
    await settle()
    reading.cancel()
    await first.aclose()
    await second.aclose()
    assert upstream.closed == 1
    gate.set()
    assert (await cache(chat())).headers[CACHE_HEADER] == "miss"
    assert len(upstream.calls) == 2


async def test_cancelled_waiters_do_not_cancel_the_flight_for_the_others() -> None:
    gate = asyncio.Event()
    upstream = FakeUpstream(gate=gate)
    cache, _ = exact_cache(upstream)
    tasks = [asyncio.create_task(cache(chat())) for _ in range(3)]
    await settle()
    tasks[0].cancel()
    await settle()
    gate.set()
    done = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(done[0], asyncio.CancelledError)
    assert all(isinstance(r, Completed) for r in done[1:])
    assert len(upstream.calls) == 1


async def test_the_upstream_call_is_cancelled_when_every_waiter_leaves() -> None:
    gate = asyncio.Event()
    upstream = FakeUpstream(gate=gate)
    cache, _ = exact_cache(upstream)
    tasks = [asyncio.create_task(cache(chat())) for _ in range(2)]
    await settle()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await settle()
    gate.set()
    reply = await cache(chat())
    assert reply.headers[CACHE_HEADER] == "miss"
    assert len(upstream.calls) == 2


async def test_a_follower_waits_no_longer_than_its_own_deadline() -> None:
    """The deadline is a time on the cache's clock and is enforced on it (a ManualClock here:
    the wait ends when the clock passes the deadline, however long that takes for real)."""
    from levergate.errors import UpstreamTimeout

    gate = asyncio.Event()
    upstream = FakeUpstream(gate=gate)
    clock = ManualClock(start=1000.0)
    cache, _ = exact_cache(upstream, clock=clock)
    leader = asyncio.create_task(cache(chat()))
    await settle()
    follower = asyncio.create_task(cache(chat().with_controls(deadline=clock.now() + 30.0)))
    await settle()
    clock.advance(29.0)
    await settle()
    assert not follower.done()
    clock.advance(1.0)
    await settle()
    assert follower.done()
    with pytest.raises(UpstreamTimeout):
        follower.result()
    gate.set()
    assert isinstance(await leader, Completed)
    assert len(upstream.calls) == 1
