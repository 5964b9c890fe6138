"""OpenTelemetry traces: an extension that queues each finished request's record and exports
its spans over OTLP/HTTP from a background job (levergate/otel/exporter.py), writing the OTLP
protobuf itself (otel/otlp.py). Loaded only when `otel.endpoint` is set (levergate/app.py)."""
