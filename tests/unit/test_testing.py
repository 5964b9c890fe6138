"""`levergate.testing`: the test doubles shipped for users' tests (and levergate's own) — their
names are pinned here, and each does what its docstring promises."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import levergate.testing
from levergate.core.call import Call, Context
from levergate.core.clock import timeout
from levergate.core.reply import Completed, Event, EventSource, Reply, Stream
from levergate.errors import UpstreamUnavailable
from levergate.testing import FakeUpstream, LoopClock, VirtualTimeLoop, run_virtual


def test_the_shipped_test_doubles_are_pinned() -> None:
    assert sorted(levergate.testing.__all__) == [
        "FakeUpstream", "LoopClock", "ManualClock", "UpstreamOutcome", "VirtualTimeLoop",
        "run_virtual", "sample_value",
    ]  # fmt: skip


def chat(*, stream: bool = False, model: str = "m") -> Call:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": stream}
    return Call(kind="chat", body=body, ctx=Context("r"))


async def read(reply: Reply) -> list[dict[str, Any]]:
    assert isinstance(reply, Stream)
    try:
        return [event.json() async for event in reply]
    finally:
        await reply.aclose()


# --- the virtual-time loop ---------------------------------------------------------------------


def test_an_hour_of_sleeping_passes_in_virtual_time_exactly() -> None:
    clock = LoopClock()

    async def sleeper() -> list[float]:
        seen = [clock.now()]
        await asyncio.sleep(3600.0)
        seen.append(clock.now())
        await clock.sleep(0.25)
        seen.append(clock.now())
        return seen

    assert run_virtual(sleeper()) == [0.0, 3600.0, 3600.25]


def test_timeouts_fire_at_their_virtual_time_on_the_loop_and_on_a_loop_clock() -> None:
    clock = LoopClock()

    async def timed_out() -> tuple[float, float]:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(2.0):
                await asyncio.sleep(10.0)
        first = clock.now()
        with pytest.raises(TimeoutError):
            async with timeout(clock, 3.0):
                await asyncio.sleep(10.0)
        return first, clock.now()

    assert run_virtual(timed_out()) == (2.0, 5.0)


def test_concurrent_sleepers_wake_in_virtual_time_order() -> None:
    woke: list[tuple[str, float]] = []
    loop_time = LoopClock()

    async def sleeper(name: str, seconds: float) -> None:
        await asyncio.sleep(seconds)
        woke.append((name, loop_time.now()))

    async def main() -> None:
        async with asyncio.TaskGroup() as group:
            for name, seconds in (("c", 30.0), ("a", 1.0), ("b", 1.5)):
                group.create_task(sleeper(name, seconds))

    run_virtual(main())
    assert woke == [("a", 1.0), ("b", 1.5), ("c", 30.0)]


def test_a_loop_that_would_wait_for_ever_raises_instead_of_hanging() -> None:
    async def forever() -> None:
        await asyncio.Event().wait()

    loop = VirtualTimeLoop()
    try:
        with pytest.raises(RuntimeError, match="deadlock"):
            loop.run_until_complete(forever())
    finally:
        loop.close()


# --- the fake upstream ---------------------------------------------------------------------------


async def test_by_default_it_answers_like_a_chat_model_whole_or_streamed() -> None:
    upstream = FakeUpstream(words=("a", "b", "c"))
    whole = await upstream(chat(model="small"))
    assert isinstance(whole, Completed)
    assert whole.data["choices"][0]["message"]["content"] == "a b c"
    assert whole.data["choices"][0]["finish_reason"] == "stop"
    assert whole.data["model"] == "small"
    assert whole.usage == {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}

    chunks = await read(await upstream(chat(stream=True)))
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == "a b c"
    assert chunks[-1]["usage"] == whole.usage
    assert upstream.served_chunks == 3
    assert upstream.closed == 1
    assert len(upstream.calls) == 2


async def test_the_script_answers_first_then_the_default_for_ever() -> None:
    async def events() -> EventSource:
        yield Event.of({"choices": [{"delta": {"content": "s"}}]})

    scripted = Completed(data={"answer": "scripted"})
    upstream = FakeUpstream(
        script=[UpstreamUnavailable("down"), scripted, lambda: Stream(events())],
        default=lambda: Completed(data={"answer": "default"}),
    )
    with pytest.raises(UpstreamUnavailable):
        await upstream(chat())
    assert await upstream(chat()) is scripted
    assert await read(await upstream(chat())) == [{"choices": [{"delta": {"content": "s"}}]}]
    for _ in range(2):
        reply = await upstream(chat())
        assert isinstance(reply, Completed)
        assert reply.data == {"answer": "default"}
    assert len(upstream.calls) == 5


async def test_each_call_reports_the_upstream_seconds_it_is_told_to() -> None:
    upstream = FakeUpstream(name="east", seconds=0.5)
    call = chat()
    await upstream(call)
    assert call.ctx.trace.upstream_seconds == 0.5
    assert upstream.name == "east"


async def test_a_cut_stream_fails_mid_way_and_still_closes() -> None:
    upstream = FakeUpstream(cut_after=2)
    reply = await upstream(chat(stream=True))
    with pytest.raises(UpstreamUnavailable) as cut:
        await read(reply)
    assert cut.value.code == "stream_interrupted"
    assert upstream.served_chunks == 2
    assert upstream.closed == 1


async def test_a_gate_holds_every_answer_until_it_is_set() -> None:
    gate = asyncio.Event()
    upstream = FakeUpstream(gate=gate)
    answer = asyncio.create_task(upstream(chat()))
    for _ in range(5):
        await asyncio.sleep(0)
    assert len(upstream.calls) == 1
    assert not answer.done()
    gate.set()
    assert isinstance(await answer, Completed)


async def test_a_tool_call_answer_carries_one_tool_call() -> None:
    upstream = FakeUpstream(tool_call=True, finish="tool_calls")
    reply = await upstream(chat())
    assert isinstance(reply, Completed)
    choice = reply.data["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["tool_calls"][0]["function"]["name"] == "lookup"
