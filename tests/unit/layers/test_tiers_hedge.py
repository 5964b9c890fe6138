"""A hedged attempt (layers/tiers/hedge.py) on virtual time: the second is asked only once the
first overran, the first answer wins, the loser is cancelled (or its stream closed), and a
failure leaves the other to answer."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from levergate.core.reply import Completed, Event, EventSource, Reply, Stream
from levergate.errors import UpstreamUnavailable
from levergate.layers.tiers.hedge import Won, _settle, hedged
from levergate.testing import LoopClock, run_virtual

OK = Completed(data={"choices": []})


def attempt(
    seconds: float, log: list[str], name: str, *, fail: bool = False, reply: Reply = OK
) -> Callable[[], Awaitable[Reply]]:
    async def run() -> Reply:
        log.append(f"{name} asked")
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            log.append(f"{name} cancelled")
            raise
        if fail:
            raise UpstreamUnavailable(f"{name} failed")
        return reply

    return run


def race(first: float, second: float, **kw: bool) -> tuple[Won, list[str]]:
    log: list[str] = []

    async def go() -> Won:
        one = attempt(first, log, "first", fail=kw.get("first_fails", False))
        two = attempt(second, log, "second", fail=kw.get("second_fails", False))
        _, won = await hedged(one, two, after=10.0, clock=LoopClock())
        return won

    return run_virtual(go()), log


def test_an_attempt_in_time_is_never_hedged() -> None:
    assert race(5.0, 1.0) == (Won.ALONE, ["first asked"])


def test_the_faster_tier_wins_and_the_slow_attempt_is_cancelled() -> None:
    won, log = race(100.0, 3.0)
    assert won is Won.SECOND
    assert log == ["first asked", "second asked", "first cancelled"]


def test_an_overrun_attempt_that_answers_first_still_wins() -> None:
    won, log = race(12.0, 30.0)
    assert won is Won.FIRST
    assert log[-1] == "second cancelled"


def test_a_failure_leaves_the_other_to_answer_and_two_failures_raise() -> None:
    assert race(20.0, 3.0, second_fails=True)[0] is Won.FIRST
    assert race(11.0, 30.0, first_fails=True)[0] is Won.SECOND
    with pytest.raises(UpstreamUnavailable):
        race(20.0, 3.0, first_fails=True, second_fails=True)


def test_a_stream_nobody_took_is_closed() -> None:
    closed: list[str] = []

    async def events() -> EventSource:
        try:
            yield Event(b'{"choices": [{"delta": {"content": "late"}}]}')
        finally:
            closed.append("closed")

    async def go() -> None:
        stream = Stream(events())
        await stream.prime()
        done: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        done.set_result(stream)
        await _settle([done])

    run_virtual(go())
    assert closed == ["closed"]
