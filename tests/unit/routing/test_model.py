"""The router file: trained, saved, loaded and scored identically; every malformed or foreign
file refused at load with its name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from levergate.errors import ConfigError
from levergate.routing.features import STRUCTURE
from levergate.routing.labels import Labels
from levergate.routing.model import FeatureSpec, Models, RouterFile, load
from levergate.routing.train import Options, fit, train

DIMS = 6


def synthetic(n: int = 240, seed: int = 1) -> tuple[np.ndarray, Labels]:
    """Rows whose first coordinate says whether the strong model is needed."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, DIMS + len(STRUCTURE)))
    hard = x[:, 0] > 0.3
    cheap = np.where(hard, rng.random(n) < 0.2, rng.random(n) < 0.9).astype(float)
    strong = np.where(hard, rng.random(n) < 0.9, rng.random(n) < 0.9).astype(float)
    return x, Labels([f"q{i}" for i in range(n)], cheap, strong, "synthetic.csv")


def trained(tmp_path: Path, **options: Any) -> tuple[Path, RouterFile, np.ndarray]:
    x, labels = synthetic()
    spec = FeatureSpec(embedder="all-minilm-l6-v2", dimensions=DIMS, max_tokens=128,
                       text_chars=1024, structure=list(STRUCTURE))  # fmt: skip
    router = train(labels, x=x, spec=spec, models=Models(cheap="small", strong="big"),
                   options=Options(**options))  # fmt: skip
    path = tmp_path / "router.json"
    router.save(path)
    return path, router, x


@pytest.mark.parametrize("options", [{}, {"target": "strong_needed"}, {"hidden": 4, "c": 1.0}])
def test_round_trip_scores_the_same(tmp_path: Path, options: dict[str, Any]) -> None:
    path, router, x = trained(tmp_path, **options)
    loaded, scorer = load(path)
    assert loaded == router
    assert loaded.models == Models(cheap="small", strong="big")
    scores = scorer.score(x)
    assert scores.shape == (len(x),)
    # The learned direction: hard rows (first coordinate high) score higher.
    assert scores[x[:, 0] > 0.3].mean() > scores[x[:, 0] <= 0.3].mean()
    assert loaded.training["rows"] == 240


def test_the_threshold_is_chosen_out_of_fold_for_the_target(tmp_path: Path) -> None:
    _, router, _ = trained(tmp_path, target_quality=0.9)
    threshold, kept, share = router.threshold_for(0.9)
    assert threshold == router.threshold
    assert kept >= 0.9
    assert router.measured_at(router.threshold) == (kept, share)
    # A stricter target never needs fewer strong calls.
    assert router.threshold_for(0.99)[2] >= share
    x, labels = synthetic()
    fitted = fit(x, labels.cheap, labels.strong, options=Options(target_quality=0.9),
                 groups=labels.prompts)  # fmt: skip
    assert fitted.threshold == router.threshold


def test_single_outcome_labels_are_refused() -> None:
    x, labels = synthetic(n=20)
    same = np.ones(20)
    with pytest.raises(ConfigError, match="single outcome"):
        fit(x, same, same, options=Options(), groups=labels.prompts)


def mutate(path: Path, change: Any) -> Path:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(format="pickle"), "not a levergate router"),
        (lambda d: d.update(version=2), "version 2"),
        (lambda d: d.pop("threshold"), "malformed at threshold"),
        (lambda d: d["network"].update(mean=[0.0]), "mean and scale"),
        (lambda d: d["network"]["layers"][0].update(bias=[0.0]), "layer 0"),
        (lambda d: d["network"].update(values=[0.0, 1.0]), "outputs"),
        (lambda d: d["network"]["scale"].__setitem__(0, -1.0), "positive"),
        (lambda d: d["features"].update(structure=["log_chars"]), "structure features"),
        (lambda d: d["features"].update(dimensions=5), "mean and scale"),
    ],
)
def test_malformed_files_are_refused_by_name(tmp_path: Path, change: Any, message: str) -> None:
    path, _, _ = trained(tmp_path)
    mutate(path, change)
    with pytest.raises(ConfigError, match=message) as raised:
        load(path)
    assert str(path) in raised.value.message


def test_not_a_file_not_json(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read router file"):
        load(tmp_path / "absent.json")
    junk = tmp_path / "junk.json"
    junk.write_text("{not json")
    with pytest.raises(ConfigError, match="not JSON"):
        load(junk)
    nan = tmp_path / "nan.json"
    path, _, _ = trained(tmp_path)
    nan.write_text(path.read_text().replace('"bias":[', '"bias":[NaN,', 1))
    with pytest.raises(ConfigError, match=r"nan\.json"):
        load(nan)
