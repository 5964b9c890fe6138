"""`Service` and `Layer`, after tower and Finagle: a service is an async function from a `Call` to a
`Reply`; a layer wraps a service and returns a service. `stack` composes them in reading order."""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Protocol

from levergate.core.call import Call
from levergate.core.reply import Reply


class Service(Protocol):
    async def __call__(self, call: Call, /) -> Reply: ...


# What calling a service returns: the coroutine that answers. A layer with nothing to do after
# the layer under it (a pass-through on its path) returns the inner service's `Answer` itself,
# `def __call__(...) -> Answer`, instead of awaiting it in a coroutine of its own: one coroutine
# frame fewer a request for each such layer (issue 22).
Answer = Coroutine[Any, Any, Reply]


Layer = Callable[[Service], Service]


def stack(inner: Service, layers: Sequence[Layer | None]) -> Service:
    """`layers` are listed outermost first, the way a request meets them. A `None` is a lever
    that is switched off (each layer's `layer(...)` builder returns None then), so a stack is
    written as one list whatever the settings."""
    service = inner
    for layer in reversed(layers):
        if layer is not None:
            service = layer(service)
    return service
