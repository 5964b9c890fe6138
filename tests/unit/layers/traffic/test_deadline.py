"""Deadline on an injected clock: the deadline is a time on the gateway's clock, and the layer
enforces it on that clock, so a ManualClock (not the event loop's clock) decides when it passes."""

from __future__ import annotations

import asyncio

import pytest

from levergate.core.call import Call
from levergate.core.reply import Completed, Reply
from levergate.errors import UpstreamTimeout
from levergate.layers.traffic.deadline import Deadline
from levergate.testing import ManualClock
from tests.unit.layers.traffic.fakes import call, ok, settle


async def test_the_deadline_is_enforced_on_the_injected_clock() -> None:
    clock = ManualClock(start=50.0)
    gate = asyncio.Event()

    async def hung(call: Call) -> Reply:
        await gate.wait()
        return ok()

    attempt = asyncio.create_task(Deadline(hung, clock=clock)(call(deadline=60.0)))
    await settle()
    clock.advance(9.0)
    await settle()
    assert not attempt.done()
    clock.advance(1.0)
    await settle()
    assert attempt.done()
    with pytest.raises(UpstreamTimeout) as caught:
        attempt.result()
    assert caught.value.code == "deadline_exceeded"


async def test_an_answer_within_the_deadline_is_not_cut_later() -> None:
    clock = ManualClock(start=50.0)

    async def quick(call: Call) -> Reply:
        return ok("in time")

    reply = await Deadline(quick, clock=clock)(call(deadline=60.0))
    clock.advance(20.0)  # past the deadline: nothing is left to cancel
    await settle()
    assert isinstance(reply, Completed)
    assert reply.data["choices"][0]["message"]["content"] == "in time"
