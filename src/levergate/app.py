"""The composition root: the gateway with the features its settings turn on.

    from levergate.app import build_gateway
    async with build_gateway(settings) as gw: ...

The core (`Gateway`, the pipeline) knows no feature by name; each feature is an extension on
the `Host` seam (levergate/extension.py). This is the one module that imports them — today the
Batch API (batch/: files, batches, the runner, deferral, async requests), the request log
(requestlog/: records in SQLite or PostgreSQL, `GET /admin/log`), the dashboard (dashboard/:
`/dashboard`, over the log and the metrics) and tracing (otel/: spans over OTLP) — and the CLI
and the README build their gateway here. A feature's modules are imported only when it is on:
a gateway without `batch.enabled` never loads batch/, one without `otel.endpoint` never loads
otel/.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from levergate.config import Settings
from levergate.gateway import Gateway

if TYPE_CHECKING:
    from levergate.extension import ExtensionFactory
    from levergate.pipeline import Deps

__all__ = ["build_gateway", "extensions_for"]


def extensions_for(settings: Settings) -> list[ExtensionFactory]:
    """The features `settings` turn on, as factories `Gateway` calls with itself."""
    found: list[ExtensionFactory] = []
    if settings.batch.enabled:  # async requests and deferral ride on the Batch API's store
        from levergate.batch.extension import batch_extension

        found.append(batch_extension)
    if settings.request_log.enabled:  # every finished request in SQLite or PostgreSQL
        from levergate.requestlog.extension import request_log_extension

        found.append(request_log_extension)
    if settings.dashboard.enabled:  # /dashboard: reads the request log and the metrics
        from levergate.dashboard.extension import dashboard_extension

        found.append(dashboard_extension)
    if settings.otel.endpoint is not None:  # traces over OTLP/HTTP
        from levergate.otel.extension import otel_extension

        found.append(otel_extension)
    return found


def build_gateway(settings: Settings | None = None, *, deps: Deps | None = None) -> Gateway:
    """A gateway over `settings` (None: `Settings.load()`) with its features."""
    settings = settings or Settings.load()
    return Gateway(settings, deps=deps, extensions=extensions_for(settings))
