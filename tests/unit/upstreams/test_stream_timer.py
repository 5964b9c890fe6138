"""`StreamTimer`: a stream's idle and total timeouts on one timer; `Watchdog`: many whole reads'
deadlines on one timer. In virtual time (exact)."""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar
from unittest import mock

import pytest
from hypothesis import given
from hypothesis import strategies as st

from levergate.testing import run_virtual
from levergate.upstreams.stream_timer import StreamTimer, Watchdog

T = TypeVar("T")

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


# ---- Watchdog: the deadlines of many whole reads on one loop timer ----------------------------


def _deadline(seconds: float) -> float:
    return time.monotonic() + seconds


def run_frozen(coro: Coroutine[Any, Any, T]) -> T:
    """`run_virtual` with `time.monotonic` standing still. A deadline is on `time.monotonic`,
    moved to the loop's (virtual) clock when the read begins: on the real clock the time between
    the test's reading and the watchdog's made each deadline that much sooner — microseconds,
    or milliseconds when a loaded machine preempted the test between the two (a failure seen
    under the whole suite's load)."""
    with mock.patch.object(time, "monotonic", return_value=1000.0):
        return run_virtual(coro)


# Floating-point rounding only: the loop's virtual times are exact.
DRIFT = 1e-9


@given(
    st.lists(
        st.tuples(st.floats(0.0, 3.0), st.floats(0.1, 3.0), st.floats(0.1, 3.0)).filter(
            lambda read: abs(read[1] - read[2]) > 1e-6
        ),
        min_size=1,
        max_size=12,
    )
)
def test_each_read_ends_at_its_own_deadline_whatever_the_others_do(
    reads: list[tuple[float, float, float]],
) -> None:
    """Reads started at different times, each with its own wait and timeout, all under one
    watchdog: each returns its value if it waits less than its timeout, else times out exactly
    at its timeout, whatever the reads beside it do."""
    watch = Watchdog()

    async def one(start: float, wait: float, timeout: float) -> tuple[str, float]:
        await asyncio.sleep(start)
        loop = asyncio.get_running_loop()
        began = loop.time()
        try:
            await watch.read(asyncio.sleep(wait), _deadline(timeout))
        except TimeoutError:
            return "timed out", loop.time() - began
        return "done", loop.time() - began

    async def scenario() -> list[tuple[str, float]]:
        return list(await asyncio.gather(*(one(*read) for read in reads)))

    for (_, wait, timeout), (how, took) in zip(reads, run_frozen(scenario()), strict=True):
        assert how == ("done" if wait < timeout else "timed out")
        assert took == pytest.approx(min(wait, timeout), abs=DRIFT)


def test_many_reads_one_after_another_arm_one_timer() -> None:
    """The point of it: a read joins a set, it does not make a loop timer (the first read arms
    one; later deadlines are after it)."""
    watch = Watchdog()

    async def scenario() -> int:
        loop = asyncio.get_running_loop()
        armed = 0
        call_at = loop.call_at

        def counting(
            when: float, callback: Callable[..., object], *args: object,
            context: contextvars.Context | None = None,
        ) -> asyncio.TimerHandle:  # fmt: skip
            nonlocal armed
            armed += callback == watch._due  # the reads' sleeps make timers of their own
            return call_at(when, callback, *args, context=context)

        loop.call_at = counting  # type: ignore[method-assign]
        for _ in range(200):
            await watch.read(asyncio.sleep(0.001), _deadline(60.0))
        return armed

    assert run_frozen(scenario()) == 1


def test_no_timer_is_left_once_the_reads_are_over_and_the_armed_one_came_due() -> None:
    watch = Watchdog()

    async def scenario() -> int:
        await watch.read(asyncio.sleep(0.1), _deadline(5.0))
        await asyncio.sleep(10.0)  # the armed timer comes due and finds nothing to watch
        loop = asyncio.get_running_loop()
        return sum(not h.cancelled() for h in loop._scheduled)  # type: ignore[attr-defined]

    assert run_frozen(scenario()) == 0


def test_a_read_with_a_sooner_deadline_than_the_armed_one_times_out_on_time() -> None:
    """The timer armed for a long read (a body's total) is brought forward by a shorter one."""
    watch = Watchdog()

    async def scenario() -> tuple[str, float]:
        loop = asyncio.get_running_loop()
        long = asyncio.create_task(watch.read(asyncio.sleep(50.0), _deadline(100.0)))
        await asyncio.sleep(1.0)
        began = loop.time()
        try:
            await watch.read(asyncio.sleep(30.0), _deadline(2.0))
        except TimeoutError:
            return "timed out", loop.time() - began
        finally:
            await long  # and the long one still gets its answer
        return "done", loop.time() - began

    how, took = run_frozen(scenario())
    assert how == "timed out"
    assert took == pytest.approx(2.0, abs=DRIFT)


def test_a_cancellation_from_elsewhere_stays_a_cancellation_under_the_watchdog() -> None:
    watch = Watchdog()

    async def scenario() -> str:
        reader = asyncio.create_task(watch.read(asyncio.sleep(5.0), _deadline(1.0)))
        await asyncio.sleep(0.5)
        reader.cancel()
        try:
            await reader
        except asyncio.CancelledError:
            return "cancelled"
        except TimeoutError:
            return "timed out"
        return "finished"

    assert run_frozen(scenario()) == "cancelled"


def test_the_watchdog_serves_a_second_loop() -> None:
    """An embedder running its gateway under one `asyncio.run` after another."""
    watch = Watchdog()

    async def scenario() -> str:
        try:
            await watch.read(asyncio.sleep(5.0), _deadline(1.0))
        except TimeoutError:
            return "timed out"
        return "finished"

    assert run_frozen(scenario()) == "timed out"
    assert run_frozen(scenario()) == "timed out"
