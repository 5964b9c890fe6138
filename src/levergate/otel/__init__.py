"""OpenTelemetry traces: an extension that turns each finished request's record into spans and
exports them over OTLP/HTTP (levergate/otel/spans.py). Loaded only when `otel.endpoint` is set
(levergate/app.py), and needs the `otel` extra."""
