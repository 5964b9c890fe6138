"""The fan-out engine's invariants (levergate/fanout.py): every item run exactly once, each
result in its input slot, never more than `max_concurrency` at once, errors in their slots or
(errgroup) the first one raised with the rest cancelled, pacing on the clock, clean cancel."""

from __future__ import annotations

import asyncio
import contextlib
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from levergate.errors import BadRequest
from levergate.fanout import check_bounds, collect, fan_out, item_body
from levergate.testing import LoopClock, run_virtual

# Per item: how many loop turns it takes, and whether it fails.
ITEMS = st.lists(st.tuples(st.integers(0, 5), st.booleans()), max_size=40)


class Worker:
    def __init__(self) -> None:
        self.active = 0
        self.peak = 0
        self.runs: list[int] = []
        self.cancelled = 0

    async def __call__(self, index: int, item: tuple[int, bool]) -> int:
        turns, fails = item
        self.runs.append(index)
        self.active += 1
        self.peak = max(self.peak, self.active)
        try:
            for _ in range(turns):
                await asyncio.sleep(0)
            if fails:
                raise ValueError(f"item {index}")
            return index * 10
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.active -= 1


@settings(max_examples=60, deadline=None)
@given(ITEMS, st.integers(1, 8))
def test_results_are_in_input_order_with_errors_in_their_slots(
    items: list[tuple[int, bool]], limit: int
) -> None:
    work = Worker()

    async def go() -> list[int | Exception]:
        return await collect(items, work, clock=LoopClock(), max_concurrency=limit)

    results = asyncio.run(go())
    assert sorted(work.runs) == list(range(len(items)))  # each exactly once
    assert work.peak <= limit
    assert len(results) == len(items)
    for index, ((_, fails), result) in enumerate(zip(items, results, strict=True)):
        if fails:
            assert isinstance(result, ValueError)
            assert str(result) == f"item {index}"
        else:
            assert result == index * 10


@settings(max_examples=60, deadline=None)
@given(ITEMS, st.integers(1, 8))
def test_errgroup_raises_the_first_error_and_cancels_the_rest(
    items: list[tuple[int, bool]], limit: int
) -> None:
    work = Worker()
    seen: list[int] = []

    async def go() -> None:
        stream = fan_out(items, work, clock=LoopClock(), max_concurrency=limit, on_error="raise")
        async with contextlib.aclosing(stream):
            async for index, _ in stream:
                seen.append(index)

    if any(fails for _, fails in items):
        with pytest.raises(ValueError, match="item"):
            asyncio.run(go())
    else:
        asyncio.run(go())
        assert sorted(seen) == list(range(len(items)))
    assert work.active == 0  # everything started has ended: nothing left running
    assert all(not items[i][1] for i in seen)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 30), st.integers(1, 8), st.integers(0, 30))
def test_closing_the_stream_early_cancels_what_runs_and_keeps_what_finished(
    count: int, limit: int, keep: int
) -> None:
    work = Worker()
    items = [(3, False)] * count
    kept: list[int] = []

    async def go() -> None:
        stream = fan_out(items, work, clock=LoopClock(), max_concurrency=limit)
        async with contextlib.aclosing(stream):
            async for index, result in stream:
                assert result == index * 10
                kept.append(index)
                if len(kept) >= keep:
                    break

    asyncio.run(go())
    assert len(kept) == min(max(keep, 1), count)
    assert work.active == 0
    assert len(work.runs) <= count
    # The runs that did not finish were cancelled, not abandoned.
    assert len(work.runs) - work.cancelled >= len(kept)


def test_cancelling_the_caller_cancels_the_items_in_flight() -> None:
    work = Worker()
    items = [(10_000, False)] * 20

    async def go() -> None:
        task = asyncio.create_task(collect(items, work, clock=LoopClock(), max_concurrency=5))
        while work.active < 5:
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())
    assert work.active == 0
    assert work.cancelled == 5
    assert len(work.runs) == 5  # nothing new was started after the cancel


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 30), st.integers(1, 8), st.integers(1, 30), st.booleans())
def test_a_cancelled_map_keeps_what_finished_in_the_callers_list(
    count: int, limit: int, cancel_after: int, raise_instead: bool
) -> None:
    """`into` holds every result that finished when the fan-out was cancelled (or raised, errgroup),
    None where an item did not finish, and nothing runs on after the cancel."""
    work = Worker()
    # Item i takes i + 1 loop turns; with `raise_instead` the last item fails at once.
    items = [(i + 1, False) for i in range(count)]
    if raise_instead:
        items[-1] = (0, True)
    kept: list[int | Exception | None] = ["stale"]  # type: ignore[list-item]  # replaced

    async def go() -> None:
        task = asyncio.create_task(
            collect(items, work, clock=LoopClock(), max_concurrency=limit,
                    on_error="raise" if raise_instead else "return", into=kept)
        )  # fmt: skip
        for _ in range(cancel_after):
            await asyncio.sleep(0)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, ValueError):
            await task

    asyncio.run(go())
    assert len(kept) == count
    assert work.active == 0  # stopped cleanly: every started item ended before the cancel went on
    finished = {i for i, result in enumerate(kept) if result is not None}
    for i in finished:
        assert kept[i] == i * 10 or (raise_instead and i == count - 1)
    # What was cancelled or never started is None; what finished was never lost.
    assert len(work.runs) - work.cancelled == len(finished)


def test_into_must_be_a_list() -> None:
    async def go() -> None:
        await collect([(0, False)], Worker(), clock=LoopClock(), max_concurrency=1,
                      into=())  # type: ignore[arg-type]  # fmt: skip

    with pytest.raises(TypeError, match="into"):
        asyncio.run(go())


def test_the_first_item_runs_on_before_the_rest_have_started() -> None:
    """Workers start one per loop turn: the first item's I/O is not held back behind every
    other item entering the pipeline in the same turn."""
    started: list[int] = []
    seen_at_first_resume: list[int] = []

    async def run(index: int, _item: int) -> int:
        started.append(index)
        await asyncio.sleep(0)
        if index == 0:
            seen_at_first_resume.append(len(started))
        return index

    async def go() -> list[int | Exception]:
        return await collect(list(range(50)), run, clock=LoopClock(), max_concurrency=50)

    assert asyncio.run(go()) == list(range(50))
    assert seen_at_first_resume[0] <= 3


def test_rate_spaces_the_starts_on_the_clock() -> None:
    starts: list[float] = []

    async def go() -> list[int | Exception]:
        loop = asyncio.get_running_loop()

        async def run(index: int, _item: int) -> int:
            starts.append(loop.time())
            await asyncio.sleep(0.01)
            return index

        return await collect(list(range(6)), run, clock=LoopClock(), max_concurrency=6, rate=2.0)

    assert run_virtual(go()) == list(range(6))
    gaps = [round(b - a, 6) for a, b in itertools.pairwise(starts)]
    assert gaps == [0.5] * 5


@pytest.mark.parametrize(
    ("limit", "rate"), [(0, None), (-1, None), (1, 0.0), (1, -2.0), (1, float("nan"))]
)
def test_bounds_below_one_are_a_value_error_at_the_call(limit: int, rate: float | None) -> None:
    with pytest.raises(ValueError, match=r"max_concurrency|rate"):
        check_bounds(limit, rate)


def test_items_become_bodies_or_their_own_errors() -> None:
    assert item_body("chat", "hi", "m") == {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
    }
    assert item_body("embedding", "hi", "e") == {"model": "e", "input": "hi"}
    assert item_body("completion", "hi", "m") == {"model": "m", "prompt": "hi"}
    assert item_body("chat", {"model": "x", "messages": []}, "m")["model"] == "x"
    with pytest.raises(BadRequest, match="model"):
        item_body("chat", "hi", None)
    with pytest.raises(BadRequest, match="stream"):
        item_body("chat", {"messages": [], "stream": True}, "m")
    with pytest.raises(BadRequest, match="int"):
        item_body("chat", 42, "m")
