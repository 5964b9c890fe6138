"""The promotion gate: a candidate router replaces a route's only when it is measured to keep the
route's quality target and to save at least what the current router saves, on the same labels.

The rows are the route's logged labels the candidate never trained on
(requestlog/router_labels.py: the labels newer than its training split; all of them for a
router trained on a public file only).
Each router is measured at the threshold the route would serve it at (`learned.threshold`, the
file's own for `learned.target_quality`, else the file's): its retention (quality as a share of
the strong model's: with the strong answer as reference, the share of cheap answers that agreed
plus every strong one) and its saving (the share of calls kept off the strong model). The
candidate passes when its retention reaches the target and its saving is at least the current
router's, unless the current router itself misses the target on those rows: then it is no
benchmark to save against (the gate would keep the router that loses quality), and reaching the
target is enough. A route with no router file yet sends everything to its default, so saves
nothing and keeps everything. Both curves are kept to be printed either way: a refusal says why
in numbers.

The rows stand for the traffic only when both sides of the current threshold are sampled alike:
ordinary shadow samples cover what the router sent cheap, explored ones (`learned.explore`,
layers/route_shadow.py) what it sent strong, so the two rates should be equal. Without
exploration every row is one the current router sent cheap, and the candidate is measured only
where the current router already saves everything.

Installing is two renames (`install`): the current file is kept beside as `FILE.previous` and
the candidate's bytes replace `FILE` atomically, so a gateway watching the file (layers/
route_watch.py) never reads half of one; `rollback` swaps the two back the same way.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from levergate.errors import ConfigError
from levergate.routing.curve import Curve, curve, measured

__all__ = ["Gate", "Live", "Measured", "gate", "install", "live", "previous_of", "rollback"]

Vector = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Measured:
    """One router on the gate's rows, at the threshold the route serves it at."""

    threshold: float
    retention: float
    saving: float
    curve: Curve | None  # None: no router (everything to the default)


@dataclass(frozen=True)
class Gate:
    rows: int
    target: float
    candidate: Measured
    current: Measured
    passed: bool
    reasons: tuple[str, ...]  # why it was refused (empty when it passed)


def measure(scores: Vector, threshold: float, cheap: Vector, strong: Vector) -> Measured:
    kept, share = measured(scores, cheap, strong, threshold)
    return Measured(threshold, kept, 1.0 - share, curve(scores, cheap, strong))


def gate(
    *,
    candidate: tuple[Vector, float],
    current: tuple[Vector, float] | None,
    cheap: Vector,
    strong: Vector,
    target: float,
) -> Gate:
    """Measure the candidate's (scores, threshold) and the current router's on the same rows
    (`cheap` / `strong` correctness) and decide."""
    if len(cheap) == 0:
        raise ConfigError("the gate has no labels to measure on")
    ours = measure(*candidate, cheap, strong)
    theirs = Measured(float("inf"), 1.0, 0.0, None) if current is None else measure(
        *current, cheap, strong)  # fmt: skip
    reasons = []
    if ours.retention < target - 1e-12:
        reasons.append(f"the candidate keeps {ours.retention:.1%} of strong quality, below the "
                       f"route's target {target:.1%}")  # fmt: skip
    if ours.saving < theirs.saving - 1e-12 and theirs.retention >= target - 1e-12:
        reasons.append(f"the candidate saves {ours.saving:.1%} of strong calls, less than the "
                       f"current router's {theirs.saving:.1%}")  # fmt: skip
    return Gate(len(cheap), target, ours, theirs, not reasons, tuple(reasons))


@dataclass(frozen=True)
class Live:
    """The champion and a challenger on the same challenged live requests (layers/
    route_shadow.py): each one's retention (1 - its cheap choices that disagreed with the strong
    answer / requests) and saving (its cheap choices / requests)."""

    rows: int
    challenger: tuple[float, float]  # (retention, saving)
    champion: tuple[float, float]


def live(rows: Sequence[Mapping[str, Any]]) -> Live | None:
    """`Live` from challenger labels (`result` and the `detail` each carries), failed ones left
    out; None when there are none."""
    usable = [r for r in rows if r.get("result") in ("agree", "disagree", "strong")]
    if not usable:
        return None
    n = len(usable)

    def side(who: str) -> tuple[float, float]:
        cheap = [r for r in usable if r["detail"].get(who) == "cheap"]
        lost = sum(r["result"] == "disagree" for r in cheap)
        return 1.0 - lost / n, len(cheap) / n

    return Live(n, side("challenger"), side("champion"))


def previous_of(path: Path) -> Path:
    """Where the router a promotion replaced is kept, for `rollback`."""
    return path.with_name(path.name + ".previous")


def _write(path: Path, data: bytes) -> None:
    """`data` as `path`, atomically: written beside it, then renamed over it."""
    beside = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    beside.write_bytes(data)
    beside.replace(path)


def install(candidate: Path, route_file: Path) -> None:
    """The candidate's bytes become `route_file`; the file it replaces becomes `.previous`."""
    data = candidate.read_bytes()
    if route_file.exists():
        _write(previous_of(route_file), route_file.read_bytes())
    _write(route_file, data)


def rollback(route_file: Path) -> None:
    """Swap `route_file` and its `.previous` (a second rollback undoes the first)."""
    previous = previous_of(route_file)
    if not previous.is_file():
        raise ConfigError(f"no previous router to roll back to: {previous} does not exist")
    older = previous.read_bytes()
    if route_file.exists():
        _write(previous, route_file.read_bytes())
    _write(route_file, older)
