"""OpenTelemetry traces (`otel`): off unless an OTLP/HTTP endpoint is named."""

from __future__ import annotations

from pydantic import Field, SecretStr

from levergate.config.base import _Strict

__all__ = ["OtelSettings"]


class OtelSettings(_Strict):
    """One span per finished request (GenAI semantic conventions) and a child span per upstream
    attempt, exported over OTLP/HTTP (protobuf) by a background job from a bounded queue
    (levergate/otel/). Needs no extra package. Off (no endpoint): nothing is loaded, nothing
    runs."""

    # The collector's base URL, e.g. http://127.0.0.1:4318 (spans go to `<endpoint>/v1/traces`).
    endpoint: str | None = None
    # Extra headers for the collector (an API key); redacted wherever settings are shown.
    headers: dict[str, SecretStr] = Field(default_factory=dict)
    service_name: str = "levergate"
    # The share of requests traced when the client sent no `traceparent` (a client's sampled
    # flag is followed as sent).
    sample_ratio: float = Field(1.0, ge=0.0, le=1.0)
    # Spans kept waiting for export; beyond it new spans are dropped and counted
    # (levergate_otel_spans_dropped_total{reason="queue_full"}).
    max_queue: int = Field(2048, ge=1, le=1_000_000)
    # Seconds between exports (sooner when a batch waits: 1,024 spans, or half of `max_queue`
    # when that is less, not below 512 unless `max_queue` is).
    export_interval_seconds: float = Field(1.0, gt=0, le=600)
    # Seconds an export may take, its retries included (as the OpenTelemetry SDK's exporter);
    # then its spans are dropped and counted (reason="export_failed").
    timeout_seconds: float = Field(10.0, gt=0, le=600)
