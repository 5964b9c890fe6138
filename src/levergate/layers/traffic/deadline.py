"""Deadline: each attempt gets only what is left of the request's deadline.

PER MODEL, under Retry and above Balance: the deadline (`x-levergate-timeout`, set at the edge
as an absolute time) bounds waiting for a limit, the trip to the provider and the wait for the
response head or first event. A request already out of time is not sent at all. The deadline
is a time on the gateway's clock (`Gateway.make_call` reads it from there), and it is enforced
on that clock too (`core.clock.timeout`), so an injected clock and the deadlines agree. Once the
reply has started, the transport's own idle and total timeouts govern the rest of the body —
cutting a stream the client is reading would lose work it has partly received.

Hitting the deadline is the request's condition, not the endpoint's: it surfaces as
`UpstreamTimeout` with code `deadline_exceeded`, which Retry does not retry (no time is left).
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from levergate.core.call import Call
from levergate.core.clock import Clock, timeout
from levergate.core.reply import Reply
from levergate.core.service import Answer, Layer, Service
from levergate.errors import UpstreamTimeout

if TYPE_CHECKING:
    from levergate.layers.shared import Shared


class Deadline:
    @classmethod
    def layer(cls, *, shared: Shared) -> Layer:
        return partial(cls, clock=shared.clock)

    def __init__(self, inner: Service, *, clock: Clock) -> None:
        self._inner = inner
        self._clock = clock

    def __call__(self, call: Call) -> Answer:
        deadline = call.ctx.controls.deadline
        if deadline is None:
            return self._inner(call)
        return self._within(call, deadline)

    async def _within(self, call: Call, deadline: float) -> Reply:
        remaining = deadline - self._clock.now()
        if remaining <= 0:
            raise _expired()
        try:
            async with timeout(self._clock, remaining):
                return await self._inner(call)
        except TimeoutError:
            raise _expired() from None


def _expired() -> UpstreamTimeout:
    return UpstreamTimeout(
        "The request's deadline passed before the upstream answered.",
        code="deadline_exceeded",
    )
