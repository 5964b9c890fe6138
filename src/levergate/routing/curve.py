"""The cost-quality curve of a router on labelled rows, and the threshold for a target quality.

Pure numpy. A router gives each prompt a score; the prompts scoring at least the threshold go to
the strong model, the others to the cheap one. Sweeping the threshold from above the highest
score down to the lowest traces the curve: the share of calls sent to the strong model (the
RouteLLM cost convention) against the quality reached (the mean correctness of whichever model
each prompt went to). Tied scores cannot be split by a threshold, so the curve has one point per
distinct score, not per row.

`threshold_for` picks the highest threshold (fewest strong calls) whose quality is at least
`target` x the strong model's quality on the same rows. Used on training folds only: the
threshold the router ships with is chosen on data it is then not measured on.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Vector = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Curve:
    thresholds: Vector  # descending; the first is above every score (nothing goes strong)
    strong_share: Vector  # ascending, from 0 to 1
    quality: Vector  # mean correctness at each point
    cheap_quality: float
    strong_quality: float

    @property
    def retention(self) -> Vector:
        """Quality as a share of the strong model's (1.0: as good as always asking it)."""
        return self.quality / self.strong_quality if self.strong_quality else self.quality * 0

    def point_for(self, target: float) -> int:
        """The index of the cheapest point reaching `target` retention (the last point, all
        strong, when none does)."""
        reached = np.flatnonzero(self.retention >= target - 1e-12)
        return int(reached[0]) if reached.size else len(self.thresholds) - 1

    def saving_at(self, target: float) -> float:
        """1 - strong share at the cheapest point reaching `target` retention."""
        return 1.0 - float(self.strong_share[self.point_for(target)])

    def threshold_for(self, target: float) -> float:
        return float(self.thresholds[self.point_for(target)])


def curve(scores: Vector, cheap: Vector, strong: Vector) -> Curve:
    """The curve of `scores` on rows where `cheap`/`strong` are 1.0 for a correct answer."""
    n = len(scores)
    if n == 0 or len(cheap) != n or len(strong) != n:
        raise ValueError("curve: scores and labels must be non-empty and of one length")
    order = np.argsort(-scores, kind="stable")
    ranked = scores[order]
    gain = (strong - cheap)[order]
    quality = (cheap.sum() + np.concatenate([[0.0], np.cumsum(gain)])) / n
    # Cut points: before every row whose score is below the previous one, and after the last.
    cuts = np.concatenate([[0], np.flatnonzero(ranked[1:] < ranked[:-1]) + 1, [n]])
    above = float(ranked[0]) + 1.0
    thresholds = np.array([above if k == 0 else float(ranked[k - 1]) for k in cuts])
    return Curve(
        thresholds=thresholds, strong_share=cuts / n, quality=quality[cuts],
        cheap_quality=float(cheap.mean()), strong_quality=float(strong.mean()),
    )  # fmt: skip


def random_saving(cheap: Vector, strong: Vector, target: float) -> float:
    """The expected saving of routing a random share p of calls to the strong model: quality is
    linear in p, so the share that reaches `target` retention follows directly."""
    cq, sq = float(cheap.mean()), float(strong.mean())
    if cq >= target * sq:
        return 1.0
    if sq <= cq:
        return 0.0
    return 1.0 - (target * sq - cq) / (sq - cq)


def route_strong(scores: Vector, threshold: float) -> npt.NDArray[np.bool_]:
    return scores >= threshold


def measured(
    scores: Vector, cheap: Vector, strong: Vector, threshold: float
) -> tuple[float, float]:
    """(retention, strong share) of routing these rows at `threshold`."""
    picks = route_strong(scores, threshold)
    quality = float(np.where(picks, strong, cheap).mean())
    strong_quality = float(strong.mean())
    return (quality / strong_quality if strong_quality else 0.0), float(picks.mean())
