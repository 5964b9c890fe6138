"""`Service` and `Layer`, after tower and Finagle: a service is an async function from a `Call` to a
`Reply`; a layer wraps a service and returns a service. `stack` composes them in reading order."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from levergate.core.call import Call
from levergate.core.reply import Reply


class Service(Protocol):
    async def __call__(self, call: Call, /) -> Reply: ...


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
