"""The cost-quality curve of a cascade's confidence signal on labelled rows. Pure numpy.

A cascade (layers/cascade/) asks the cheap model first and escalates to the strong one when a
check of the cheap answer fails. A scored check passes when its score reaches the threshold
(`Verdict.scored` in policies/confidence.py: `score >= threshold`), so a row escalates exactly
when `score < threshold`; `escalate` is that comparison and nothing else here decides it.

Sweeping the threshold up from the lowest score to just above the highest traces the curve: the
share of rows escalated against the quality reached (cheap correctness where the answer was
accepted, strong correctness where it was escalated). Tied scores cannot be split by a
threshold, so the curve has one point per distinct score, plus the point escalating everything.
Each point's threshold is the lowest accepted score (for the last point, the next float above
the highest), so `escalate(scores, point.threshold)` reproduces the point exactly.

Cost differs from a router's: a cascade pays the cheap call on every row and the strong call on
the escalated ones. With the cheap call priced at `cheap_cost` x the strong call's (0 is
RouteLLM's convention of counting strong calls only), the saving against asking the strong
model every time is `1 - escalation - cheap_cost`, negative when the cascade costs more.

Two references sit beside the curve: random escalation (quality linear in the share, as for
routing) and the oracle, a confidence that knows whether the cheap answer is right. The oracle
escalates exactly the rows the cheap model got wrong; to just reach a target it escalates the
fewest of those, the ones the strong model gets right first (each such row adds one correct
answer, no escalation adds more), which bounds every confidence signal from below.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from levergate.routing.curve import first_reaching, kept_by, random_saving, retention, sweep

Vector = npt.NDArray[np.float64]
_EPS = 1e-12


def escalate(scores: Vector, threshold: float) -> npt.NDArray[np.bool_]:
    """The rows a cascade sends on: those whose check fails, `score < threshold`."""
    return scores < threshold


@dataclass(frozen=True)
class CascadeCurve:
    thresholds: Vector  # ascending; the first is the lowest score (nothing escalates)
    escalation: Vector  # ascending, from 0 to 1: the share of rows sent to the strong model
    quality: Vector  # mean correctness at each point
    cheap_quality: float
    strong_quality: float
    cheap_cost: float  # the cheap call's price as a share of the strong call's

    @property
    def retention(self) -> Vector:
        """Quality as a share of the strong model's (1.0: as good as always asking it)."""
        return retention(self.quality, self.strong_quality)

    @property
    def saving(self) -> Vector:
        return saving(self.escalation, self.cheap_cost)

    def point_for(self, target: float) -> int:
        """The index of the lowest escalation reaching `target` retention (the last point,
        everything escalated, when none does)."""
        return first_reaching(self.retention, target)

    def escalation_at(self, target: float) -> float:
        return float(self.escalation[self.point_for(target)])

    def threshold_for(self, target: float) -> float:
        return float(self.thresholds[self.point_for(target)])

    def at_share(self, wanted: float) -> int:
        """The index of the first point escalating at least `wanted` of the rows."""
        i = int(np.searchsorted(self.escalation, wanted - _EPS))
        return min(i, len(self.escalation) - 1)


def saving(escalation: Vector, cheap_cost: float) -> Vector:
    """1 - escalation - cheap_cost: the cheap call on every row, the strong call on escalated
    ones, against the strong call on every row."""
    return 1.0 - escalation - cheap_cost


def cascade_curve(
    scores: Vector, cheap: Vector, strong: Vector, *, cheap_cost: float = 0.0
) -> CascadeCurve:
    """The curve of confidence `scores` on rows where `cheap`/`strong` are 1.0 when correct."""
    n = len(scores)
    if n == 0 or len(cheap) != n or len(strong) != n:
        raise ValueError("cascade curve: scores and labels must be non-empty and of one length")
    if not np.isfinite(scores).all():
        raise ValueError("cascade curve: scores must be finite")
    if not 0.0 <= cheap_cost < 1.0:
        raise ValueError("cascade curve: need 0 <= cheap_cost < 1")
    ranked, cuts, quality = sweep(scores, cheap, strong)  # the lowest scores escalate first
    above = float(np.nextafter(ranked[-1], math.inf))
    thresholds = np.array([float(ranked[k]) if k < n else above for k in cuts])
    return CascadeCurve(
        thresholds=thresholds, escalation=cuts / n, quality=quality,
        cheap_quality=float(cheap.mean()), strong_quality=float(strong.mean()),
        cheap_cost=cheap_cost,
    )  # fmt: skip


def measured(
    scores: Vector, cheap: Vector, strong: Vector, threshold: float
) -> tuple[float, float]:
    """(retention, escalation) of a cascade checking these rows at `threshold`."""
    return kept_by(escalate(scores, threshold), cheap, strong)


def random_escalation(cheap: Vector, strong: Vector, target: float) -> float:
    """The expected share a cascade escalating at random needs for `target` retention."""
    return 1.0 - random_saving(cheap, strong, target)


def oracle_escalation(cheap: Vector, strong: Vector, target: float) -> float:
    """The fewest rows (as a share) any escalation needs for `target` retention: wrong cheap
    answers the strong model gets right, one correct answer each. Always enough, since they
    bring quality to P(cheap or strong right) >= the strong model's."""
    n = len(cheap)
    needed = target * float(strong.sum()) - float(cheap.sum())  # correct answers short
    helpful = int(((cheap == 0) & (strong == 1)).sum())
    return min(max(0, math.ceil(needed - 1e-9)), helpful) / n


def oracle_point(cheap: Vector, strong: Vector) -> tuple[float, float]:
    """(retention, escalation) of escalating exactly the rows the cheap model got wrong."""
    return measured(cheap, cheap, strong, 0.5)
