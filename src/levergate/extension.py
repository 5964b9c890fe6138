"""The seam between the core and its features: `Host` (what a feature may use) and `Extension`
(what it contributes: background jobs, and how it closes; the routes it adds are the edge's half,
`server.route.Routed`, which the edge asks of each extension).

The core — the pipeline and `Gateway` — knows no feature by name. A feature (the Batch API
and its runner, deferral and async requests; later the request log, the dashboard, the
analyzer) is built by the composition root (`levergate.app.build_gateway`) as a factory
`Host -> Extension`; `Gateway(settings, extensions=[...])` calls each factory with itself
once the pipeline is built, runs the extension's jobs under its supervisor from `start` and
closes it in `aclose`, features before the pipeline; the edge (`server.edge.Edge`) serves the
routes of every extension that has some (`server.route.Routed`).

A feature reaches the gateway only through `Host`: make and serve a call (the whole pipeline,
every lever), the clock every deadline is on, the configured models, the keyring, the recorder
every finished request goes through, the redactor, the service tiers' book, and the settings
(its own section and the shared limits). It never reaches into `Pipeline` or `Shared`. The
direction is pinned by tests/unit/test_import_direction.py: core ↛ features ↛ server
internals.

    def my_feature(host: Host) -> Extension: ...
    gateway = Gateway(settings, extensions=[my_feature])
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from levergate.config import ModelSettings, Settings
    from levergate.core.call import Call, Kind, Trace
    from levergate.core.clock import Clock
    from levergate.core.interactive import Interactive
    from levergate.core.jobs import BackgroundJob
    from levergate.core.reply import Reply
    from levergate.layers.keys.build import KeyKit
    from levergate.layers.measure.recorder import Recorder
    from levergate.layers.tiers.book import TierBook
    from levergate.redact import Redactor

__all__ = ["Extension", "ExtensionFactory", "Host", "extension_of"]

E = TypeVar("E")


def extension_of(extensions: Iterable[object], kind: type[E]) -> E | None:
    """The extension of type `kind` among a gateway's extensions (`gateway.extensions`), if
    that feature is on."""
    return next((found for found in extensions if isinstance(found, kind)), None)


class Host(Protocol):
    """What a feature may use of the gateway (`Gateway` is one)."""

    @property
    def settings(self) -> Settings: ...

    @property
    def clock(self) -> Clock:
        """The gateway's clock: every deadline is a time on it."""
        ...

    @property
    def models(self) -> Mapping[str, ModelSettings]:
        """The configured aliases, by name (`*` included when configured)."""
        ...

    @property
    def keyring(self) -> KeyKit | None:
        """The gateway keys, their quotas and budgets (None with auth and the admin API off)."""
        ...

    @property
    def recorder(self) -> Recorder:
        """Where finished requests are recorded: every path emits through it."""
        ...

    @property
    def redactor(self) -> Redactor: ...

    @property
    def extensions(self) -> Sequence[Extension]:
        """The gateway's features, once all are built (a dashboard finds the request log)."""
        ...

    @property
    def interactive(self) -> Interactive:
        """Client requests in flight on this process (the batch runner yields to them)."""
        ...

    @property
    def tiers(self) -> TierBook:
        """What was seen of each model's service tiers, and the options a request has among
        them (the deferral chooses the provider's batch API by it)."""
        ...

    def make_call(
        self,
        kind: Kind,
        body: Any,
        *,
        headers: Mapping[str, str] | None = None,
        trace: Trace | None = None,
        raw: bytes | None = None,
        request_id: str | None = None,
    ) -> Call: ...

    async def serve(self, call: Call) -> Reply: ...


class Extension(Protocol):
    """A feature, as the core sees it: its background jobs and how it closes. One that serves
    HTTP is also `server.route.Routed` (its routes, and what it takes over of the model-call
    routes): the edge asks for those, so the core never names a server type."""

    def jobs(self) -> Sequence[BackgroundJob]:
        """Run for the gateway's lifetime under its supervisor (restarted after a crash)."""
        ...

    async def aclose(self) -> None: ...


ExtensionFactory = Callable[[Host], Extension]
