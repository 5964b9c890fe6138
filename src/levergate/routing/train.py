"""Training the learned router offline (`levergate router train`): scikit-learn fits, numpy serves.

What it learns. The router sends a prompt to the strong model when the expected gain of doing
so is high enough. For a fixed number of strong calls, quality is highest when those calls go to
the prompts with the largest E[strong correct - cheap correct] — so the default target, `gain`,
has three classes (only the strong model right / both or neither / only the cheap one right)
and the score is the expected gain. `strong_needed` (strong right and cheap wrong) ignores the
prompts where routing up loses an answer; `cheap_wrong` also spends strong calls on prompts
both models miss. benchmarks/routing.py measures all three; `gain` saves the most at 95%.

The threshold is chosen on out-of-fold scores of the training rows (k-fold, identical prompts
kept in one fold) for the target retention, never hard-coded; the same out-of-fold curve is
stored as the file's calibration so `learned.target_quality` can re-choose it at start-up.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from levergate.config import LocalEmbeddingsSettings
from levergate.config.routing import TRAIN_C, TRAIN_FOLDS, TRAIN_TARGET_QUALITY
from levergate.errors import ConfigError
from levergate.routing.curve import Curve, curve
from levergate.routing.features import STRUCTURE, embed_text, vectors
from levergate.routing.labels import Labels
from levergate.routing.model import (
    Calibration,
    Dense,
    FeatureSpec,
    Models,
    Network,
    RouterFile,
    Scorer,
    Target,
)

Matrix = npt.NDArray[np.float64]
_VALUES: dict[str, dict[int, float]] = {
    "gain": {0: -1.0, 1: 0.0, 2: 1.0},
    "strong_needed": {0: 0.0, 1: 1.0},
    "cheap_wrong": {0: 0.0, 1: 1.0},
}


@dataclass(frozen=True)
class Options:
    target: Target = "gain"
    c: float = TRAIN_C  # see config/routing.py for the measurement behind it
    hidden: int = 0  # 0: a linear model; otherwise one ReLU layer of this width (an MLP)
    folds: int = TRAIN_FOLDS
    target_quality: float = TRAIN_TARGET_QUALITY
    seed: int = 0


@dataclass(frozen=True)
class Fitted:
    network: Network
    calibration: Curve  # out of fold, on the training rows
    threshold: float


def classes(cheap: Matrix, strong: Matrix, target: Target) -> npt.NDArray[np.int64]:
    if target == "gain":
        found = strong - cheap + 1
    elif target == "strong_needed":
        found = (strong == 1) & (cheap == 0)
    else:
        found = cheap == 0
    out: npt.NDArray[np.int64] = np.asarray(found, dtype=np.int64)
    return out


def fit(
    x: Matrix,
    cheap: Matrix,
    strong: Matrix,
    *,
    options: Options,
    groups: list[str],
    calibrate: npt.NDArray[np.bool_] | None = None,
) -> Fitted:
    """A network for the rows `x` and the threshold for `options.target_quality`, chosen on
    out-of-fold scores of these rows (of the `calibrate` rows alone, when given: labels from
    traffic are measured in their own terms, so a threshold for them is read on them)."""
    GroupKFold = _sklearn().GroupKFold  # noqa: N806 - a class

    y = classes(cheap, strong, options.target)
    if len(np.unique(y)) < 2:
        raise ConfigError("the labels have a single outcome: there is nothing to learn")
    folds = min(options.folds, len(set(groups)))
    if folds < 2:
        raise ConfigError("need at least two distinct prompts to choose a threshold")
    scores = np.zeros(len(y))
    splitter = GroupKFold(n_splits=folds, shuffle=True, random_state=options.seed)
    for train_rows, test_rows in splitter.split(x, y, groups=groups):
        if len(np.unique(y[train_rows])) < 2:
            scores[test_rows] = 0.0
            continue
        network = _network(x[train_rows], y[train_rows], options)
        scores[test_rows] = Scorer(network, inputs=x.shape[1]).score(x[test_rows])
    rows = slice(None) if calibrate is None else calibrate
    calibration = curve(scores[rows], cheap[rows], strong[rows])
    return Fitted(
        network=_network(x, y, options), calibration=calibration,
        threshold=calibration.threshold_for(options.target_quality),
    )  # fmt: skip


def _sklearn() -> Any:
    """scikit-learn's model_selection, or a clear error: training needs it, serving does not."""
    try:
        from sklearn import model_selection
    except ImportError:
        raise ConfigError(
            "levergate router train needs scikit-learn: pip install 'levergate[router-train]'"
        ) from None
    return model_selection


def _network(x: Matrix, y: npt.NDArray[np.int64], options: Options) -> Network:
    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale[scale < 1e-9] = 1.0
    z = (x - mean) / scale
    values = _VALUES[options.target]
    if options.hidden:
        from sklearn.neural_network import MLPClassifier

        mlp = MLPClassifier(
            hidden_layer_sizes=(options.hidden,), alpha=1.0 / options.c, max_iter=300,
            early_stopping=True, random_state=options.seed,
        )  # fmt: skip
        mlp.fit(z, y)
        weights = [np.asarray(w) for w in mlp.coefs_]
        biases = [np.asarray(b) for b in mlp.intercepts_]
        found = [int(k) for k in mlp.classes_]
    else:
        from sklearn.linear_model import LogisticRegression

        model = LogisticRegression(C=options.c, max_iter=3000).fit(z, y)
        weights, biases = [model.coef_.T], [model.intercept_]
        found = [int(k) for k in model.classes_]
    if weights[-1].shape[1] == 1:  # a binary model's one logit z: softmax([0, z]) is the same
        weights[-1] = np.hstack([np.zeros_like(weights[-1]), weights[-1]])
        biases[-1] = np.concatenate([[0.0], biases[-1]])
    layers = [
        Dense(weight=w.tolist(), bias=b.tolist()) for w, b in zip(weights, biases, strict=True)
    ]
    return Network(mean=mean.tolist(), scale=scale.tolist(), layers=layers,
                   values=[values[k] for k in found])  # fmt: skip


def embedder(settings: LocalEmbeddingsSettings) -> Callable[[list[str]], npt.NDArray[np.float32]]:
    """MiniLM run directly, in batches (the CLI is synchronous; no micro-batcher needed)."""
    from levergate.upstreams.embeddings_local.minilm import MiniLM

    model = MiniLM(settings)

    def embed(texts: list[str]) -> npt.NDArray[np.float32]:
        parts = [model.encode(texts[i : i + 64]).vectors for i in range(0, len(texts), 64)]
        return np.concatenate(parts) if parts else np.zeros((0, model.dimensions), np.float32)

    return embed


def features(
    prompts: list[str], *, embed: Callable[[list[str]], npt.NDArray[np.float32]], text_chars: int
) -> Matrix:
    return vectors(prompts, embed([embed_text(p, text_chars=text_chars) for p in prompts]))


def train(
    labels: Labels,
    *,
    x: Matrix,
    spec: FeatureSpec,
    models: Models,
    options: Options,
    labels_path: Path | None = None,
    calibrate: npt.NDArray[np.bool_] | None = None,
) -> RouterFile:
    """The router file for `labels` whose feature rows are `x` (built with `spec`); its
    threshold and calibration read on the `calibrate` rows alone when given (`fit`)."""
    started = time.perf_counter()
    fitted = fit(x, labels.cheap, labels.strong, options=options, groups=labels.prompts,
                 calibrate=calibrate)  # fmt: skip
    c = fitted.calibration
    training: dict[str, Any] = {
        "rows": len(labels), "labels": labels.source, "folds": options.folds,
        "c": options.c, "hidden": options.hidden, "seed": options.seed,
        "cheap_accuracy": c.cheap_quality, "strong_accuracy": c.strong_quality,
        "oof_saving_at_target": c.saving_at(options.target_quality),
        "trained_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "seconds": round(time.perf_counter() - started, 2),
    }  # fmt: skip
    if labels_path is not None:
        training["labels_sha256"] = hashlib.sha256(labels_path.read_bytes()).hexdigest()
    return RouterFile(
        models=models, features=spec, target=options.target, network=fitted.network,
        threshold=fitted.threshold, target_quality=options.target_quality,
        calibration=Calibration(thresholds=c.thresholds.tolist(),
                                strong_share=c.strong_share.tolist(),
                                retention=c.retention.tolist()),
        training=training,
    )  # fmt: skip


def spec_for(settings: LocalEmbeddingsSettings, *, dimensions: int) -> FeatureSpec:
    return FeatureSpec(embedder=settings.identity, dimensions=dimensions,
                       max_tokens=settings.max_tokens, text_chars=settings.max_tokens * 8,
                       structure=list(STRUCTURE))  # fmt: skip
