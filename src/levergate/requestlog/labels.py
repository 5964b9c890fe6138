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

The semantic cache's verifications are rows too (layer `semantic`, layers/cache/checks.py): the
name is the model or route asked, `cheap` is `cache`, the strong alias the one asked, and
`similarity` the would-be hit's; `result` `none` marks a sampled lookup with no would-be hit in
the band (it counts for the hit rate, not the false-hit rate). `levergate cache threshold`
reads them (policies/cache_threshold.py).

A challenger router's comparisons (layer `challenger`, layers/route_shadow.py) carry both
routers' decisions and the candidate's SHA-256 in `detail`; `levergate router promote` reads
them as the candidate's live retention.

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
    # Added with the semantic cache's verifications (NULL in older rows, which get the columns
    # when the store opens): the would-be hit's similarity, and a layer's own facts as JSON.
    ("similarity", "REAL"),
    ("detail", "TEXT"),
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
        label.similarity, label.detail,
    )  # fmt: skip


# The layers whose labels are a cheap answer compared with a strong one: what a router learns.
ROUTER_LAYERS = ("route", "cascade")


@dataclass(frozen=True, slots=True)
class Labelled:
    """Which labels a reader wants: one route or cascade (None: all), a time range, some layers
    (None: all), and whether rows that compared nothing (failed, the semantic cache's `none`)
    are wanted too."""

    name: str | None = None
    since: float | None = None
    until: float | None = None
    layers: tuple[str, ...] | None = None
    uncompared: bool = False

    def where(self, ph: str) -> tuple[str, list[Any]]:
        parts: list[str] = [] if self.uncompared else ["result NOT IN ('failed', 'none')"]
        values: list[Any] = []
        for sql, value in (("name = ?", self.name), ("ts >= ?", self.since),
                           ("ts < ?", self.until)):  # fmt: skip
            if value is not None:
                parts.append(sql.replace("?", ph))
                values.append(value)
        if self.layers is not None:
            parts.append(f"layer IN ({', '.join([ph] * len(self.layers))})" if self.layers
                         else "1 = 0")  # fmt: skip
            values.extend(self.layers)
        return " AND ".join(parts) or "1 = 1", values


def as_label(row: Sequence[Any]) -> dict[str, Any]:
    return dict(zip(LABEL_NAMES, row, strict=True))
