"""The tracing feature as an extension (`Host -> Extension`, levergate/extension.py): it hands the
recorder a `SpanSink` and shuts the exporter down (flushing what is queued) when the gateway
closes. No job of its own: the SDK's batch processor exports from its thread."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING

from levergate.errors import ConfigError

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

    from levergate.core.jobs import BackgroundJob
    from levergate.extension import Extension, Host

__all__ = ["otel_extension"]


class Tracing:
    def __init__(self, provider: TracerProvider) -> None:
        self.provider = provider

    def jobs(self) -> Sequence[BackgroundJob]:
        return ()

    async def aclose(self) -> None:
        await asyncio.to_thread(self.provider.shutdown)  # exports what is still queued


def otel_extension(host: Host) -> Extension:
    try:
        from levergate.otel.spans import SpanSink, tracer_provider
    except ImportError as exc:
        raise ConfigError(
            f"otel.endpoint is set but OpenTelemetry is not installed ({exc.name} missing): "
            "pip install 'levergate[otel]'"
        ) from None
    provider, ids = tracer_provider(host.settings)
    host.recorder.trace_to(SpanSink(provider, ids, host.settings))
    return Tracing(provider)
