"""Fallback across model aliases: on which failures, in which order, and never mid-stream."""

from __future__ import annotations

import pytest

from levergate.core.call import Call
from levergate.core.reply import Completed, Reply
from levergate.errors import (
    BadRequest,
    Overloaded,
    UpstreamRejected,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from levergate.layers.traffic.fallback import Fallback, failure_kind
from levergate.layers.traffic.metrics import TrafficMetrics
from levergate.testing import FakeUpstream, sample_value
from tests.unit.layers.cache.helpers import drain
from tests.unit.layers.traffic.fakes import call, ok, server_error, stream_of, throttled


class ByModel:
    """A Dispatch stand-in: one scripted endpoint per alias."""

    def __init__(self, **aliases: FakeUpstream) -> None:
        self.aliases = aliases
        self.order: list[str] = []

    async def __call__(self, call: Call) -> Reply:
        self.order.append(call.model)
        return await self.aliases[call.model](call)


def _fallback(inner: ByModel, metrics: TrafficMetrics | None = None) -> Fallback:
    return Fallback(
        inner,
        chains={"big": ["other", "local"]},
        context_chains={"big": ["long"]},
        on=("rate_limited", "unavailable", "timeout", "overloaded"),
        metrics=metrics or TrafficMetrics(),
    )


def _context_error() -> UpstreamRejected:
    return UpstreamRejected(
        "too long", upstream="up", upstream_status=400, code="context_length_exceeded"
    )


async def test_failures_walk_the_list_in_order() -> None:
    inner = ByModel(
        big=FakeUpstream(default=server_error()),
        other=FakeUpstream(default=throttled()),
        local=FakeUpstream(default=ok("local")),
        long=FakeUpstream(default=ok),
    )
    metrics = TrafficMetrics()
    reply = await _fallback(inner, metrics)(call(model="big"))
    assert isinstance(reply, Completed)
    assert inner.order == ["big", "other", "local"]
    assert sample_value(metrics.fallbacks, "big", "local") == 1


async def test_a_prompt_too_long_goes_to_the_larger_context_model() -> None:
    inner = ByModel(
        big=FakeUpstream(default=_context_error()),
        other=FakeUpstream(default=ok),
        local=FakeUpstream(default=ok),
        long=FakeUpstream(default=ok("long")),
    )
    await _fallback(inner)(call(model="big"))
    assert inner.order == ["big", "long"]


async def test_trims_own_context_refusal_goes_to_the_larger_context_model_too() -> None:
    refusal = BadRequest("too long even trimmed", param="messages", code="context_length_exceeded")
    inner = ByModel(
        big=FakeUpstream(default=refusal),
        other=FakeUpstream(default=ok),
        local=FakeUpstream(default=ok),
        long=FakeUpstream(default=ok("long")),
    )
    await _fallback(inner)(call(model="big"))
    assert inner.order == ["big", "long"]


async def test_the_callers_own_errors_do_not_fall_back() -> None:
    bad = UpstreamRejected("bad", upstream="up", upstream_status=400, code="invalid_value")
    inner = ByModel(
        big=FakeUpstream(default=bad),
        other=FakeUpstream(default=ok),
        local=FakeUpstream(default=ok),
        long=FakeUpstream(default=ok),
    )
    with pytest.raises(UpstreamRejected):
        await _fallback(inner)(call(model="big"))
    assert inner.order == ["big"]


async def test_a_stream_failing_before_its_first_byte_falls_back_but_not_after() -> None:
    inner = ByModel(
        big=FakeUpstream(default=stream_of("a", fail_after=0)),
        other=FakeUpstream(default=stream_of("b", "c")),
        local=FakeUpstream(default=ok),
        long=FakeUpstream(default=ok),
    )
    chunks = await drain(await _fallback(inner)(call(model="big", stream=True)))
    assert len(chunks) == 2
    assert inner.order == ["big", "other"]
    inner.order.clear()
    inner.aliases["big"].default = stream_of("a", "b", fail_after=1)
    with pytest.raises(UpstreamUnavailable):
        await drain(await _fallback(inner)(call(model="big", stream=True)))
    assert inner.order == ["big"]


def test_failure_kinds() -> None:
    assert failure_kind(throttled()) == "rate_limited"
    assert failure_kind(server_error()) == "unavailable"
    assert failure_kind(UpstreamTimeout("t", upstream="u")) == "timeout"
    assert failure_kind(UpstreamTimeout("t", code="deadline_exceeded")) is None
    assert failure_kind(Overloaded("full")) == "overloaded"
    assert failure_kind(_context_error()) == "context_length"
