"""The cascade's Prometheus metrics, in the gateway's registry.

Escalation rate is `levergate_cascade_escalations_total / levergate_cascade_requests_total`; the
quality signal is `levergate_cascade_confidence` (each numeric check's score: logprobs, reported
confidences, judge scores), with `levergate_cascade_checks_total` counting passes and failures.
The money side (the default model's estimated cost minus what was paid) is the ledger's: it
prices `trace.route` and `trace.side_spend`. Every label is bounded: cascade names by
`cascade.max_metric_names`, aliases by the configuration, signals and outcomes by the code.

What the checks cost in quality is measured by shadow samples (layers/cascade/shadow.py; the
series are layers/shadow.py's `ShadowMeter`, which routes use too):
`levergate_cascade_shadow_total{cascade, result}` counts them (agree, disagree, failed, dropped)
and `levergate_cascade_quality_retention{cascade}` is the share of the strong model's quality
the cascade is estimated to keep (policies/shadow.py has the formula and its counterfactual),
from every answered request and every compared sample since start. The gauge is absent for a
cascade until its first sample is compared (agree or disagree): no number is better than a
made-up one. Its shadow calls' dollars are `levergate_spend_usd{kind="shadow"}`.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

from levergate.layers.shadow import ShadowMeter

# Logprobs (negative) and probabilities (0..1) share one histogram, labelled by signal.
_SCORE_BUCKETS = (
    -10.0, -5.0, -3.0, -2.0, -1.5, -1.0, -0.75, -0.5, -0.3, -0.2, -0.1, -0.05, 0.0,
    0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0,
)  # fmt: skip


class CascadeMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "levergate_cascade_requests",
            "Cascade requests by how they ended (accepted, escalated, fallback_to_cheap, failed) "
            "and the alias that answered.",
            ("cascade", "outcome", "answered"),
            registry=registry,
        )
        self.escalations = Counter(
            "levergate_cascade_escalations",
            "Escalations from one cascade step to the next, by why (check, error).",
            ("cascade", "from_alias", "to_alias", "why"),
            registry=registry,
        )
        self.checks = Counter(
            "levergate_cascade_checks",
            "Confidence checks run on a step's answer, by signal and result (pass, fail).",
            ("cascade", "signal", "result"),
            registry=registry,
        )
        self.confidence = Histogram(
            "levergate_cascade_confidence",
            "The score each numeric confidence check judged on (a logprob, a probability).",
            ("cascade", "signal"),
            buckets=_SCORE_BUCKETS,
            registry=registry,
        )
        self.shadows = ShadowMeter(
            registry,
            layer="cascade",
            shadow_help="Accepted answers shadowed by the cascade's strongest step, by result "
            "(agree, disagree, failed: a call or the comparison failed, dropped: the queue was "
            "full).",
            retention_help="Estimated share of the strongest step's quality the cascade keeps: "
            "1 - accepted share x shadow disagreement rate. Absent until a shadow sample is "
            "compared.",
        )

    def answered(self, cascade: str, outcome: str, alias: str) -> None:
        """A request the cascade answered: accepted, escalated or fallback_to_cheap."""
        self.requests.labels(cascade, outcome, alias).inc()
        self.shadows.answered(cascade, cheap=outcome == "accepted")
