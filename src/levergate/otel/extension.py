"""The tracing feature as an extension (`Host -> Extension`, levergate/extension.py): it hands the
recorder its `SpanExporter` as the tracer, runs the exporter's job under the gateway's
supervisor, and exports what is still queued when the gateway closes (otel/exporter.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from levergate.core.jobs import BackgroundJob
from levergate.extension import extension_of
from levergate.otel.exporter import OtelMetrics, SpanExporter

if TYPE_CHECKING:
    from levergate.extension import Extension, Host

__all__ = ["Tracing", "otel_extension"]


class Tracing:
    def __init__(self, host: Host) -> None:
        registry = host.recorder.telemetry.registry
        self.exporter = SpanExporter(host.settings, metrics=OtelMetrics(registry))
        host.recorder.trace_to(self.exporter)

    def jobs(self) -> Sequence[BackgroundJob]:
        return [BackgroundJob("otel-export", self.exporter.run)]

    async def aclose(self) -> None:
        await self.exporter.aclose()


def otel_extension(host: Host) -> Extension:
    return Tracing(host)


def tracing_of(extensions: Sequence[Any]) -> Tracing | None:
    """Tracing among a gateway's extensions (`gateway.extensions`), if on."""
    return extension_of(extensions, Tracing)
