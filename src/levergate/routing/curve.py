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
        return retention(self.quality, self.strong_quality)

    def point_for(self, target: float) -> int:
        """The index of the cheapest point reaching `target` retention (the last point, all
        strong, when none does)."""
        return first_reaching(self.retention, target)

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
    ranked, cuts, quality = sweep(-scores, cheap, strong)  # the highest scores go strong first
    above = -float(ranked[0]) + 1.0
    thresholds = np.array([above if k == 0 else -float(ranked[k - 1]) for k in cuts])
    return Curve(
        thresholds=thresholds, strong_share=cuts / n, quality=quality,
        cheap_quality=float(cheap.mean()), strong_quality=float(strong.mean()),
    )  # fmt: skip


def sweep(
    keys: Vector, cheap: Vector, strong: Vector
) -> tuple[Vector, npt.NDArray[np.intp], Vector]:
    """Rows sent to the strong model in ascending `keys` order, one group of tied keys at a
    time (a threshold cannot split a tie): the sorted keys, the cut points (before each group
    and after the last: how many rows went strong) and the quality at each cut. Routers and
    cascades (cascade_curve.py) both sweep this way."""
    n = len(keys)
    order = np.argsort(keys, kind="stable")
    ranked = keys[order]
    gain = (strong - cheap)[order]
    quality = (cheap.sum() + np.concatenate([[0.0], np.cumsum(gain)])) / n
    cuts = np.concatenate([[0], np.flatnonzero(ranked[1:] > ranked[:-1]) + 1, [n]])
    return ranked, cuts, quality[cuts]


def retention(quality: Vector, strong_quality: float) -> Vector:
    return quality / strong_quality if strong_quality else quality * 0


def first_reaching(kept: Vector, target: float) -> int:
    """The index of the first point whose retention reaches `target`, else the last point."""
    reached = np.flatnonzero(kept >= target - 1e-12)
    return int(reached[0]) if reached.size else len(kept) - 1


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
    return kept_by(route_strong(scores, threshold), cheap, strong)


def kept_by(sent: npt.NDArray[np.bool_], cheap: Vector, strong: Vector) -> tuple[float, float]:
    """(retention, share sent) when the `sent` rows are answered by the strong model."""
    quality = float(np.where(sent, strong, cheap).mean())
    strong_quality = float(strong.mean())
    return (quality / strong_quality if strong_quality else 0.0), float(sent.mean())
