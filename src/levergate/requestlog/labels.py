"""Shadow labels in the request log: each compared shadow sample (layers/measure/shadow_labels.py)
as one row of `lg_labels`, beside its request's row in `lg_requests` (joined by request id).

What a row keeps always: when, the request's id, which lever (`route` or `cascade`) and which of
its routes or cascades, the cheap alias whose answer the client got and the strong one that
answered again, the result (agree / disagree / failed), how the answers were compared and the
judge's score, the tenant and feature, and a SHA-256 of the prompt and of each answer (so two
labels of one prompt are recognisable without keeping it). The texts themselves (the prompt the
router reads, both answers) only where bodies are logged for the route, the cheap or the strong
alias (`request_log.bodies.models`), redacted and capped like bodies, and never for a tenant in
`request_log.bodies.private_tenants`: a label without its prompt counts, but cannot train.

Bounded like the records: older than `max_age_days` deleted, and past `max_labels` the oldest.
`levergate labels export` and `levergate router train --from-log` read them (`Labelled`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from levergate.layers.measure.shadow_labels import ShadowLabel

__all__ = ["LABELS_TABLE", "LABEL_COLUMNS", "LABEL_NAMES", "Labelled", "label_row"]

LABELS_TABLE = "lg_labels"
LABEL_COLUMNS: tuple[tuple[str, str], ...] = (
    ("ts", "REAL"),
    ("request_id", "TEXT"),
    ("layer", "TEXT"),
    ("name", "TEXT"),
    ("cheap", "TEXT"),
    ("strong", "TEXT"),
    ("result", "TEXT"),
    ("compare", "TEXT"),
    ("judge_score", "REAL"),
    ("tenant", "TEXT"),
    ("feature", "TEXT"),
    ("prompt_sha256", "TEXT"),
    ("cheap_sha256", "TEXT"),
    ("strong_sha256", "TEXT"),
    ("prompt", "TEXT"),
    ("cheap_text", "TEXT"),
    ("strong_text", "TEXT"),
)
LABEL_NAMES: tuple[str, ...] = tuple(name for name, _ in LABEL_COLUMNS)


def _digest(text: str | None) -> str | None:
    return None if text is None else hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()


def label_row(
    at: float, label: ShadowLabel, texts: tuple[str, str, str | None] | None
) -> tuple[Any, ...]:
    """The row of `label`, compared at `at` (epoch seconds), in `LABEL_COLUMNS` order; `texts`:
    the prompt and both answers as the log keeps them (redacted, capped), or None."""
    prompt, cheap, strong = texts if texts is not None else (None, None, None)
    return (
        at, label.request_id, label.layer, label.name, label.cheap, label.strong, label.result,
        label.compare, label.judge_score, label.tenant, label.feature, _digest(label.prompt),
        _digest(label.cheap_text), _digest(label.strong_text), prompt, cheap, strong,
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class Labelled:
    """Which labels a reader wants: one route or cascade (None: all), a time range."""

    name: str | None = None
    since: float | None = None
    until: float | None = None

    def where(self, ph: str) -> tuple[str, list[Any]]:
        parts, values = ["result <> 'failed'"], []
        for sql, value in (("name = ?", self.name), ("ts >= ?", self.since),
                           ("ts < ?", self.until)):  # fmt: skip
            if value is not None:
                parts.append(sql.replace("?", ph))
                values.append(value)
        return " AND ".join(parts), values


def as_label(row: Sequence[Any]) -> dict[str, Any]:
    return dict(zip(LABEL_NAMES, row, strict=True))
