"""`ShadowLabel`: one shadow comparison as a value, and `ShadowLabels`, where they are handed out.

A shadow sample (layers/shadow.py) ends after the request it sampled was answered and its record
emitted, so its verdict cannot be a field of that record: it is a value of its own, keyed by the
request's id, that the shadow workers hand to every listener once the comparison is done. The
request log listens (requestlog/: a row of its labels table beside the request's row), and the
learning loop reads those rows back as labels (`levergate labels export`, `levergate router
train --from-log`): the strong answer is the reference, so a cheap answer that agreed is a
correct one and one that disagreed is not.

The hub lives in `Shared` (built once per pipeline) and is reached by features through the
`Recorder` (`host.recorder.shadow_labels`), as finished records are. A listener runs on the
event loop, like a sink: it must be quick, and one that raises is logged once and never stops
the shadow worker.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import NamedTuple

__all__ = ["ShadowLabel", "ShadowLabels"]

log = logging.getLogger("levergate.measure")


class ShadowLabel(NamedTuple):
    """One compared shadow sample: `cheap`'s answer to the request against `strong`'s."""

    request_id: str  # the sampled request's id (its request log row's)
    layer: str  # "route" or "cascade": which lever answered with the cheap alias
    name: str  # the route's or the cascade's name
    cheap: str  # the alias whose answer the client got
    strong: str  # the alias that answered again, the reference
    result: str  # agree, disagree or failed (a call or the judge gave no verdict)
    compare: str  # how: "normalized" or "judge"
    judge_score: float | None  # the judge's probability that the answers are equivalent
    prompt: str  # the last user message: what a learned router scores
    cheap_text: str
    strong_text: str | None  # None when the strong call failed
    tenant: str
    feature: str
    # The semantic cache's verifications (layers/cache/checks.py): the would-be hit's similarity
    # (None: no neighbour survived the guards down to the band's floor).
    similarity: float | None = None
    detail: str | None = None  # a layer's own facts, JSON (the threshold and the band's floor)


Listener = Callable[[ShadowLabel], None]


class ShadowLabels:
    """Every compared shadow sample, handed to each listener in the order they listened."""

    def __init__(self) -> None:
        self._listeners: tuple[Listener, ...] = ()
        self._failed: set[str] = set()

    def listen(self, listener: Listener) -> None:
        self._listeners = (*self._listeners, listener)

    @property
    def heard(self) -> bool:
        """Whether anyone listens (the shadow workers skip building labels otherwise)."""
        return bool(self._listeners)

    def emit(self, label: ShadowLabel) -> None:
        for listener in self._listeners:
            try:
                listener(label)
            except Exception:  # like a sink: never the shadow worker's problem
                name = getattr(listener, "__qualname__", type(listener).__name__)
                if name not in self._failed:
                    self._failed.add(name)
                    log.exception("shadow labels: %s failed (logged once)", name)
