"""The core values: streams settle their resources on close, layers compose in reading order."""

from __future__ import annotations

import contextlib
import dataclasses
import time

import pytest

from levergate.core.call import Call, Context, Note, Trace, new_call, new_context
from levergate.core.controls import DEFAULT_CONTROLS, Principal, Priority
from levergate.core.reply import Completed, Event, EventSource, Reply, Stream
from levergate.core.service import Service, stack


def make_call(**body: object) -> Call:
    return Call(kind="chat", body={"model": "m", "messages": [], **body}, ctx=Context("r1"))


async def _events(log: list[str], n: int) -> EventSource:
    try:
        for i in range(n):
            yield Event(b'{"i":%d}' % i)
    finally:
        log.append("inner closed")


async def test_closing_a_derived_stream_closes_outer_then_inner() -> None:
    log: list[str] = []

    async def tag(events: EventSource) -> EventSource:
        try:
            async for event in events:
                yield event
        finally:
            log.append("outer closed")

    stream = Stream(_events(log, 10)).through(tag)
    async for event in stream:
        assert event.json() == {"i": 0}
        break
    await stream.aclose()
    assert log == ["outer closed", "inner closed"]


async def test_an_exhausted_stream_runs_every_finaliser() -> None:
    log: list[str] = []
    stream = Stream(_events(log, 3)).through(lambda events: events)
    assert [e.json()["i"] async for e in stream] == [0, 1, 2]
    assert log == ["inner closed"]


async def test_a_failing_layer_still_closes_the_streams_under_it() -> None:
    log: list[str] = []

    async def failing(events: EventSource) -> EventSource:
        async for event in events:
            yield event
            raise ValueError("layer broke")

    stream = Stream(_events(log, 10)).through(failing).through(lambda events: events)
    seen: list[int] = []
    with contextlib.suppress(ValueError):
        seen.extend([event.json()["i"] async for event in stream])
    assert seen == []  # the failure ends the comprehension before it hands anything over
    assert log == []  # the source is suspended, not finished...
    await stream.aclose()
    assert log == ["inner closed"]  # ...until the stream on top is closed


def test_calls_are_derived_not_mutated() -> None:
    call = make_call(stream=True)
    renamed = call.with_body(model="upstream-m")
    assert call.model == "m"
    assert renamed.model == "upstream-m"
    assert renamed.ctx is call.ctx
    assert call.with_ctx(principal=Principal(tenant="t")).ctx.principal.tenant == "t"
    assert call.ctx.principal.tenant == "default"
    later = call.with_controls(priority=Priority.BATCH)
    assert later.ctx.controls.priority is Priority.BATCH
    assert call.ctx.controls.priority is Priority.DEFAULT
    assert later.ctx.trace is call.ctx.trace
    assert call.stream
    assert not call.wants_usage_chunk
    assert make_call(stream_options={"include_usage": True}).wants_usage_chunk


def test_raw_bytes_travel_only_while_the_body_is_unchanged() -> None:
    call = Call(kind="chat", body={"model": "m"}, ctx=Context("r"), raw=b'{"model":"m"}')
    assert call.with_ctx(principal=Principal(tenant="t")).raw == b'{"model":"m"}'
    assert call.with_body(model="n").raw is None


async def test_stack_applies_layers_outermost_first() -> None:
    seen: list[str] = []

    class Tag:
        def __init__(self, inner: Service, name: str) -> None:
            self.inner, self.name = inner, name

        async def __call__(self, call: Call) -> Reply:
            seen.append(self.name)
            return await self.inner(call)

    async def answer(call: Call) -> Reply:
        seen.append("answer")
        return Completed(data={"ok": True})

    service = stack(answer, [lambda s: Tag(s, "outer"), lambda s: Tag(s, "inner")])
    reply = await service(make_call())
    assert isinstance(reply, Completed)
    assert reply.data == {"ok": True}
    assert seen == ["outer", "inner", "answer"]


def test_completed_keeps_raw_bytes_and_parses_lazily() -> None:
    raw = b'{"usage": {"prompt_tokens": 3}, "x": 1}'
    reply = Completed(raw)
    assert reply.raw is raw
    assert reply.usage == {"prompt_tokens": 3}


async def test_a_primed_stream_is_not_primed_again() -> None:
    """Priming pulls the first event once (Fallback over Retry); every event still arrives."""

    async def events() -> EventSource:
        for i in range(3):
            yield Event(b'{"i":%d}' % i)

    primed = await Stream(events()).prime()
    assert primed.primed
    assert await primed.prime() is primed
    assert [event.json()["i"] async for event in primed] == [0, 1, 2]


async def test_a_stream_that_fails_before_its_first_event_fails_when_primed_and_is_closed() -> None:
    closed: list[bool] = []

    async def first_event() -> Event:
        raise RuntimeError("refused")

    async def events() -> EventSource:
        try:
            yield await first_event()
        finally:
            closed.append(True)

    stream = Stream(events())
    with pytest.raises(RuntimeError):
        await stream.prime()
    assert closed == [True]


def test_an_event_finds_its_usage_in_any_json_spacing() -> None:
    usage = {"prompt_tokens": 3, "completion_tokens": 2}
    assert (
        Event(b'{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}').usage() == usage
    )
    assert (
        Event(b'{"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}').usage()
        == usage
    )
    assert Event(b'{"choices": [], "usage": null}').usage() is None
    assert Event(b'{"choices": [{"delta": {"content": "usage"}}]}').usage() is None


def test_an_event_whose_usage_is_null_is_not_parsed_for_it() -> None:
    event = Event(b'{"choices": [{"delta": {"content": "x"}}], "usage": null}')
    assert event.usage() is None
    assert event._json is None  # the bytes alone said no: nothing was parsed


def test_a_fresh_trace_is_a_default_trace_field_by_field() -> None:
    default = Trace()
    fresh = Trace.fresh()
    for f in dataclasses.fields(Trace):
        if f.name == "started":
            assert default.started <= fresh.started <= time.perf_counter()
            continue
        assert getattr(fresh, f.name) == getattr(default, f.name), f.name
        assert type(getattr(fresh, f.name)) is type(getattr(default, f.name)), f.name
    # Its own containers: a fact written on one trace is on no other.
    other = Trace.fresh()
    fresh.notes.append(Note("layer", "text"))
    fresh.failed_endpoints.add("e")
    fresh.escalation_reasons.append("r")
    assert other.notes == []
    assert other.failed_endpoints == set()
    assert other.escalation_reasons == []
    assert other.side_spend == []
    assert fresh.side_spend is not other.side_spend


def test_the_fast_context_and_call_are_their_constructors_field_by_field() -> None:
    """`new_context` and `new_call` set the slots themselves (core/call.py): a field added to
    `Context` or `Call` and not there fails here."""
    trace, headers, principal = Trace.fresh(), {"x-request-id": "r1"}, Principal(tenant="t")
    made = Context("r1", principal, DEFAULT_CONTROLS, headers, trace)
    fast = new_context("r1", principal, DEFAULT_CONTROLS, headers, trace)
    for f in dataclasses.fields(Context):
        assert getattr(fast, f.name) is getattr(made, f.name), f.name
    body = {"model": "m", "messages": []}
    call, fast_call = Call("chat", body, made, b"{}"), new_call("chat", body, made, b"{}")
    for f in dataclasses.fields(Call):
        assert getattr(fast_call, f.name) is getattr(call, f.name), f.name
    assert fast_call == call
    assert fast_call.model == "m" == call.model
    with pytest.raises(dataclasses.FrozenInstanceError):  # still a frozen value
        fast_call.raw = None  # type: ignore[misc]


def test_a_derived_call_is_what_replace_makes() -> None:
    """`with_body`, `with_ctx` and `with_controls` build through `new_call`: the same value
    `dataclasses.replace` made, its model read afresh."""
    call = Call("chat", {"model": "m", "messages": []}, Context("r1"), b"{}")
    assert call.model == "m"
    body = call.with_body(model="n")
    assert body == dataclasses.replace(call, body={**call.body, "model": "n"}, raw=None)
    assert body.model == "n"
    assert body.raw is None
    assert body.ctx is call.ctx
    principal = Principal(tenant="t")
    ctx = call.with_ctx(principal=principal)
    assert ctx == dataclasses.replace(call, ctx=dataclasses.replace(call.ctx, principal=principal))
    assert ctx.raw == b"{}"
    assert ctx.body is call.body
    assert ctx.ctx.trace is call.ctx.trace
    controls = call.with_controls(priority=Priority.BATCH)
    assert controls.ctx.controls.priority is Priority.BATCH
    assert controls.raw == b"{}"
    assert controls.ctx.request_id == "r1"


def test_a_derived_context_refuses_a_name_that_is_no_field() -> None:
    call = Call("chat", {"model": "m"}, Context("r1"))
    with pytest.raises(TypeError, match="no field"):
        call.with_ctx(tenant="t")
