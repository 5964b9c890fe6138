"""Bounded label values for the measurement sinks (Prometheus, the ledger, prompt caching)."""

from __future__ import annotations

OTHER = "other"


class LabelValues:
    """Label values that come from clients (feature tags, tenants, model names behind a `*`
    route): at most `max_values` distinct ones of each kind become labels, later ones read
    `other`, so no client can grow /metrics without bound."""

    def __init__(self, kinds: tuple[str, ...], *, max_values: int) -> None:
        self._seen: dict[str, set[str]] = {kind: set() for kind in kinds}
        self._max_values = max_values

    def __call__(self, kind: str, value: str) -> str:
        seen = self._seen[kind]
        if value in seen or not value:
            return value
        if len(seen) >= self._max_values:
            return OTHER
        seen.add(value)
        return value
