"""The router file: a small model in JSON, loaded without pickle and scored with plain numpy.

Format `levergate-router`, version 1 (one JSON object):

    format, version        "levergate-router", 1
    models                 {"cheap": name, "strong": name}: the models the labels were for
    features               {"embedder", "dimensions", "max_tokens", "text_chars", "structure"}
    target                 what the classes are: "gain" (strong-only right / both or neither /
                           cheap-only right), "strong_needed" or "cheap_wrong" (two classes)
    network                {"mean", "scale", "layers": [{"weight", "bias"}], "values"}:
                           standardise, dense layers with ReLU between, softmax; the score is
                           the expected class value (for "gain": E[strong - cheap correct])
    threshold              scores >= threshold go to the strong model
    target_quality         the retention the threshold was chosen for
    calibration            {"thresholds", "strong_share", "retention"}: the out-of-fold curve
                           on the training rows (what `learned.target_quality` re-reads)
    training               free-form facts: rows, folds, C, the labels file and its SHA-256...

JSON rather than npz: a few hundred kilobytes, diffable, readable by any language, and nothing
in it can execute. Every shape is checked at load; a file that fails is a `ConfigError` naming it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field

from levergate.core.json_file import read_json_file, validated
from levergate.errors import ConfigError
from levergate.routing.features import STRUCTURE

FORMAT = "levergate-router"
VERSION = 1
MAX_FILE_BYTES = 64 * 1024 * 1024
Target = Literal["gain", "strong_needed", "cheap_wrong"]


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Models(_Frozen):
    cheap: str = Field(min_length=1)
    strong: str = Field(min_length=1)


class FeatureSpec(_Frozen):
    embedder: str
    dimensions: int = Field(ge=1)
    max_tokens: int = Field(ge=8)
    text_chars: int = Field(ge=1)
    structure: list[str]


class Dense(_Frozen):
    weight: list[list[float]]  # inputs x outputs
    bias: list[float]


class Network(_Frozen):
    mean: list[float]
    scale: list[float]
    layers: list[Dense] = Field(min_length=1, max_length=8)
    values: list[float] = Field(min_length=2)  # one per output class


class Calibration(_Frozen):
    thresholds: list[float]
    strong_share: list[float]
    retention: list[float]


class RouterFile(_Frozen):
    format: Literal["levergate-router"] = "levergate-router"
    version: Literal[1] = 1
    models: Models
    features: FeatureSpec
    target: Target
    network: Network
    threshold: float
    target_quality: float = Field(gt=0, le=1)
    calibration: Calibration
    training: dict[str, Any] = Field(default_factory=dict)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.model_dump_json(indent=None), encoding="utf-8")

    def threshold_for(self, target: float) -> tuple[float, float, float]:
        """(threshold, retention, strong share) of the cheapest calibration point reaching
        `target` retention on the training folds (all strong when none does)."""
        c = self.calibration
        index = next((i for i, r in enumerate(c.retention) if r >= target - 1e-12), -1)
        return c.thresholds[index], c.retention[index], c.strong_share[index]

    def measured_at(self, threshold: float) -> tuple[float, float]:
        """(retention, strong share) the calibration curve measured at `threshold`."""
        c = self.calibration
        index = max((i for i, t in enumerate(c.thresholds) if t >= threshold), default=0)
        return c.retention[index], c.strong_share[index]


class Scorer:
    """The network as numpy arrays: `score(rows)` is one matrix product per layer."""

    def __init__(self, network: Network, *, inputs: int) -> None:
        self._mean = np.array(network.mean)
        self._scale = np.array(network.scale)
        self._layers = [(np.array(d.weight), np.array(d.bias)) for d in network.layers]
        self._values = np.array(network.values)
        width = inputs
        if self._mean.shape != (inputs,) or self._scale.shape != (inputs,):
            raise ValueError(f"mean and scale must have {inputs} entries")
        if not np.all(np.isfinite(self._scale)) or np.any(self._scale <= 0):
            raise ValueError("scale entries must be finite and positive")
        for i, (weight, bias) in enumerate(self._layers):
            if weight.ndim != 2 or weight.shape[0] != width or bias.shape != (weight.shape[1],):
                raise ValueError(f"layer {i} does not take {width} inputs")
            width = weight.shape[1]
        if width != len(self._values):
            raise ValueError(f"the last layer has {width} outputs for {len(self._values)} values")
        arrays = [self._mean, self._values, *(a for pair in self._layers for a in pair)]
        if not all(np.all(np.isfinite(a)) for a in arrays):
            raise ValueError("the network holds a non-finite number")

    def score(self, rows: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        x = (rows - self._mean) / self._scale
        for i, (weight, bias) in enumerate(self._layers):
            x = x @ weight + bias
            if i < len(self._layers) - 1:
                x = np.maximum(x, 0.0)
        x = x - x.max(axis=1, keepdims=True)
        probs = np.exp(x)
        probs /= probs.sum(axis=1, keepdims=True)
        scores: npt.NDArray[np.float64] = probs @ self._values
        return scores


def load(path: str | Path) -> tuple[RouterFile, Scorer]:
    """The router file and its scorer (raises ConfigError naming the file and what is wrong)."""
    path = Path(path)
    data = read_json_file(path, what="router file", max_bytes=MAX_FILE_BYTES,
                          kind="a levergate router")  # fmt: skip
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ConfigError(f"router file {path} is not a levergate router (no format {FORMAT!r})")
    if data.get("version") != VERSION:
        raise ConfigError(
            f"router file {path} has version {data.get('version')!r}; "
            f"this levergate reads {VERSION}"
        )
    router = validated(RouterFile, data, what="router file", path=path)
    if router.features.structure != list(STRUCTURE):
        raise ConfigError(
            f"router file {path} was trained with other structure features "
            f"({router.features.structure}); retrain it with this levergate"
        )
    try:
        scorer = Scorer(router.network, inputs=router.features.dimensions + len(STRUCTURE))
    except ValueError as exc:
        raise ConfigError(f"router file {path} is malformed: {exc}") from None
    return router, scorer
