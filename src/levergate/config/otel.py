"""OpenTelemetry traces (`otel`): off unless an OTLP/HTTP endpoint is named."""

from __future__ import annotations

from pydantic import Field, SecretStr

from levergate.config.base import _Strict

__all__ = ["OtelSettings"]


class OtelSettings(_Strict):
    """One span per finished request (GenAI semantic conventions) and a child span per upstream
    attempt, exported over OTLP/HTTP (protobuf) from a background thread. Needs the `otel` extra
    (`pip install 'levergate[otel]'`). Off (no endpoint): nothing is loaded, nothing runs."""

    # The collector's base URL, e.g. http://127.0.0.1:4318 (spans go to `<endpoint>/v1/traces`).
    endpoint: str | None = None
    # Extra headers for the collector (an API key); redacted wherever settings are shown.
    headers: dict[str, SecretStr] = Field(default_factory=dict)
    service_name: str = "levergate"
    # The share of requests traced when the client sent no `traceparent` (a client's sampled
    # flag is followed as sent).
    sample_ratio: float = Field(1.0, ge=0.0, le=1.0)
    # Spans kept waiting for export; beyond it new spans are dropped (the SDK counts them).
    max_queue: int = Field(2048, ge=1, le=1_000_000)
    # Seconds between exports (the SDK's batch span processor).
    export_interval_seconds: float = Field(1.0, gt=0, le=600)
