"""One line of the edge's route table, and the shapes of what it names: the edge's surface for
features (with `exchange`, `guards` and `params`).

A feature that serves HTTP is `Routed`: its `routes()` returns these, and `Edge` appends them to
the core's table (`server.routes.ROUTES`) for each of the gateway's extensions that is one.
This module and `exchange` import nothing else of the server, so a feature that adds routes
depends on the edge's value types only, never on its internals (the handlers, `Edge`, the
transports): tests/unit/test_import_direction.py pins it.

A handler's first argument is the `Edge` serving the request; it is typed `Any` here so this
module needs no import of `server.edge` (a feature's handler ignores it or passes it on to a
guard).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import KW_ONLY, dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from levergate.config import Settings
    from levergate.core.controls import AsyncAsk
    from levergate.errors import LevergateError
    from levergate.server.exchange import Request, Response

__all__ = ["Divert", "ErrorShape", "Guard", "Handler", "Route", "Routed"]

Handler = Callable[[Any, "Request"], Awaitable["Response"]]
Guard = Callable[[Any, "Request"], Awaitable[None]]
ErrorShape = Callable[["LevergateError"], "Response"]
# Asked by the model-call routes (chat, completions, embeddings) when the call's controls ask
# for it to run later (`controls.run_async`: x-levergate-async, -defer...): (edge, request,
# endpoint path, the ask) -> the answer when the feature takes the request over, else None.
Divert = Callable[[Any, "Request", str, "AsyncAsk"], Awaitable["Response | None"]]


@dataclass(frozen=True, slots=True)
class Route:
    method: str
    path: str
    handler: Handler
    _: KW_ONLY
    guard: Guard | None = None
    stream: bool = False
    max_body_bytes: int | None = None
    enabled: Callable[[Settings], bool] | None = None
    errors: ErrorShape | None = None
    id_header: str | None = None


@runtime_checkable
class Routed(Protocol):
    """The edge's half of an extension (levergate/extension.py): what it serves over HTTP."""

    def routes(self) -> Sequence[Route]:
        """Added to the core's route table."""
        ...

    def diverts(self) -> Sequence[Divert]:
        """Asked by the model-call routes for a call that asks to run later."""
        ...
