"""Shadow sampling: which cheap answers are answered again by the strong model, off the request
path, to measure the quality a lever keeps (layers/shadow.py runs the samples, policies/shadow.py
compares them). Shared by the two levers that answer with a cheaper model than the one asked
for: a cascade's accepted answers (`cascade.shadow`, `cascades[].shadow`) and a route's answers
from an alias other than its default (`routing.shadow`, `routing.routes[].shadow`).

    shadow: {rate: 0.05, compare: normalized}       the layer-level default sampling
    shadow: {rate: 0.2, compare: judge, judge: judge-model}     one cascade's or route's own
    shadow: {queue: 256, concurrency: 2, timeout_seconds: 120}  the layer's one queue

Off by default (`rate: 0`); every shadow call is paid for (`levergate_spend_usd{kind="shadow"}`).
A cascade's or a route's own `shadow` replaces the layer-level sampling (rate, compare, judge)
whole; the queue, its workers and their deadline are the layer's.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Literal

from pydantic import Field, model_validator

from levergate.config.base import _Strict


class ShadowSamplingSettings(_Strict):
    """Which cheap answers are shadowed by the strong model, and how the two are compared."""

    # The share of cheap answers shadowed (0: none; each one is a strong-model call).
    rate: float = Field(0.0, ge=0, le=1)
    compare: Literal["normalized", "judge"] = "normalized"
    judge: str | None = Field(None, min_length=1)  # the alias asked, with `compare: judge`
    # The judge's probability that the answers are equivalent, at which they agree.
    judge_threshold: float = Field(0.5, ge=0, le=1)
    judge_max_tokens: int = Field(16, ge=1, le=1024)
    # The newest characters of the conversation and of each answer the judge is shown.
    judge_max_chars: int = Field(32_000, ge=256)

    @model_validator(mode="after")
    def _judge_iff_judged(self) -> ShadowSamplingSettings:
        if self.compare == "judge" and self.judge is None:
            raise ValueError("shadow.compare 'judge' needs shadow.judge (an alias)")
        if self.compare != "judge" and self.judge is not None:
            raise ValueError("shadow.judge is only asked with shadow.compare 'judge'")
        return self


class ShadowSettings(ShadowSamplingSettings):
    """A layer's default sampling (of every cascade, of every route) and its one shadow queue."""

    # Shadow calls waiting for a worker; a sample that finds the queue full is dropped (and
    # counted): the request path never waits for a shadow.
    queue: int = Field(256, ge=1, le=100_000)
    # Shadow calls (and their judge calls) in flight at once, for the layer.
    concurrency: int = Field(2, ge=1, le=64)
    # Each shadow call's deadline (the strong alias's own retries and limits apply within).
    timeout_seconds: float = Field(120.0, gt=0, le=3600)


def unknown_judge(sampling: ShadowSamplingSettings | None, known: Collection[str]) -> str | None:
    """The judge `sampling` names when it is not one of the `known` aliases, else None."""
    judge = sampling.judge if sampling is not None else None
    return judge if judge is not None and judge not in known else None
