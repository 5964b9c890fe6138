"""The traffic levers' Prometheus metrics, registered in the gateway's own registry.

Kept apart from `Telemetry` (the measurement layer's request metrics) so limits, retries,
balancing and ejection can count what they do without that layer knowing about them.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


class TrafficMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        reg = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self.registry = reg
        self.attempts = Counter(
            "levergate_upstream_attempts",
            "Calls sent to an endpoint (retries included), by outcome.",
            ("endpoint", "outcome"),
            registry=reg,
        )
        self.retries = Counter(
            "levergate_retries", "Retries by the error that caused them.", ("reason",),
            registry=reg,
        )  # fmt: skip
        self.retries_denied = Counter(
            "levergate_retries_denied",
            "Retryable failures not retried, by why (budget, attempts, deadline, floor).",
            ("why",),
            registry=reg,
        )
        self.shed = Counter(
            "levergate_shed", "Requests refused by a limit instead of waiting for it.",
            ("scope", "priority", "why"), registry=reg,
        )  # fmt: skip
        self.wait = Histogram(
            "levergate_limit_wait_seconds",
            "Time a request waited for a limit before it was admitted.",
            ("scope", "priority"),
            buckets=_WAIT_BUCKETS,
            registry=reg,
        )
        self.tenant_queued = Gauge(
            "levergate_tenant_queued",
            "Requests waiting at the front door for their tenant's limits, all tenants.",
            registry=reg,
        )
        self.ejections = Counter(
            "levergate_ejections", "Endpoints ejected as outliers.", ("endpoint",), registry=reg
        )
        self.ejected = Gauge(
            "levergate_ejected", "1 while an endpoint is ejected.", ("endpoint",), registry=reg
        )
        self.health_checks = Counter(
            "levergate_health_checks",
            "Active health probes of an endpoint, by outcome (pass, fail).",
            ("endpoint", "outcome"),
            registry=reg,
        )
        self.fallbacks = Counter(
            "levergate_fallbacks", "Requests sent to a fallback alias.", ("model", "fallback"),
            registry=reg,
        )  # fmt: skip
        self.store_failovers = Counter(
            "levergate_limit_store_failovers",
            "Times the shared limit store became unreachable and limits went per process.",
            registry=reg,
        )
