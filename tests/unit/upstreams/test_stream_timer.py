"""`StreamTimer`: a stream's idle and total timeouts on one timer, in virtual time (exact)."""

from __future__ import annotations

import asyncio
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from levergate.testing import run_virtual
from levergate.upstreams.stream_timer import StreamTimer

IDLE = 1.0


def timer(total: float = 3600.0) -> StreamTimer:
    return StreamTimer(idle=IDLE, deadline=time.monotonic() + total)


def test_a_read_waiting_longer_than_idle_times_out_as_idle_when_it_is_due() -> None:
    async def scenario() -> tuple[str | None, float]:
        stream = timer()
        await stream.read(asyncio.sleep(0.9))
        loop = asyncio.get_running_loop()
        with pytest.raises(TimeoutError):
            await stream.read(asyncio.sleep(5.0))
        stream.close()
        return stream.expired, loop.time()

    expired, at = run_virtual(scenario())
    assert expired == "idle"
    assert at == pytest.approx(1.9)


def test_the_total_deadline_ends_a_stream_of_quick_reads() -> None:
    async def scenario() -> tuple[int, str | None]:
        stream = timer(total=10.0)
        reads = 0
        try:
            while True:
                await stream.read(asyncio.sleep(0.5))
                reads += 1
        except TimeoutError:
            return reads, stream.expired
        finally:
            stream.close()

    assert run_virtual(scenario()) == (19, "total")


def test_time_between_reads_is_the_consumers_and_never_counts() -> None:
    async def scenario() -> int:
        stream = timer()
        for _ in range(5):
            await stream.read(asyncio.sleep(0.5))
            await asyncio.sleep(10 * IDLE)  # the consumer holds the event
        stream.close()
        return 5

    assert run_virtual(scenario()) == 5


# A read of exactly `idle` ends as its timer fires: either may come first, as with any timeout.
@given(st.lists(st.floats(0.0, 2.0).filter(lambda wait: wait != IDLE), min_size=1, max_size=30))
def test_a_read_times_out_exactly_when_it_waits_longer_than_idle(waits: list[float]) -> None:
    """Reads of any lengths: the first one longer than `idle` is the one that times out, at
    `idle` into it; every read before it returns its value."""

    async def scenario() -> tuple[list[float], float | None]:
        stream = timer()
        loop = asyncio.get_running_loop()
        done: list[float] = []
        try:
            for wait in waits:
                started = loop.time()
                done.append(await stream.read(asyncio.sleep(wait, result=wait)))
        except TimeoutError:
            return done, loop.time() - started
        finally:
            stream.close()
        return done, None

    done, timed_out_after = run_virtual(scenario())
    first_long = next((i for i, w in enumerate(waits) if w > IDLE), None)
    if first_long is None:
        assert (done, timed_out_after) == (waits, None)
    else:
        assert done == waits[:first_long]
        assert timed_out_after == pytest.approx(IDLE)


def test_closing_leaves_no_timer_on_the_loop() -> None:
    async def scenario() -> int:
        stream = timer()
        await stream.read(asyncio.sleep(0.1))
        stream.close()
        loop = asyncio.get_running_loop()
        return sum(not h.cancelled() for h in loop._scheduled)  # type: ignore[attr-defined]

    assert run_virtual(scenario()) == 0


def test_a_cancellation_from_elsewhere_stays_a_cancellation() -> None:
    async def scenario() -> str:
        stream = timer()
        reader = asyncio.create_task(stream.read(asyncio.sleep(5.0)))
        await asyncio.sleep(0.5)
        reader.cancel()
        try:
            await reader
        except asyncio.CancelledError:
            return "cancelled"
        finally:
            stream.close()
        return "finished"

    assert run_virtual(scenario()) == "cancelled"


def test_a_cancellation_as_the_timer_fires_stays_a_cancellation() -> None:
    """Both at once (the task cancelled by its owner in the same step the idle timer fires):
    the owner's cancellation wins, as with `asyncio.timeout`."""

    async def scenario() -> str:
        stream = timer()
        reader = asyncio.create_task(stream.read(asyncio.sleep(5.0)))
        loop = asyncio.get_running_loop()
        loop.call_at(loop.time() + IDLE, reader.cancel)
        try:
            await reader
        except asyncio.CancelledError:
            return "cancelled"
        except TimeoutError:
            return "timed out"
        finally:
            stream.close()
        return "finished"

    assert run_virtual(scenario()) == "cancelled"
