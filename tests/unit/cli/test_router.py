"""`levergate router train | eval` on a small labelled set built here, with the real MiniLM."""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Any

import pytest

from levergate.cli.main import main
from levergate.cli.router import name_columns
from levergate.routing.model import load

EASY = ["Say hello to {}.", "What colour is the {} sky?", "Thank {} for the gift.",
        "Is {} a common first name?", "Wish {} a happy birthday."]  # fmt: skip
HARD = ["Prove that the integral of f over [0, {}] converges.",
        "Derive the eigenvalues of the {}x{} Hessian matrix.",
        "Compute the limit of sin(x)/x^{} as x tends to zero, with a proof."]  # fmt: skip


def labelled(path: Path, rows: int = 90, *, seed: int = 0, jsonl: bool = False) -> Path:
    """Prompts where the cheap model fails the hard (maths) ones and both pass the easy ones."""
    rng = random.Random(seed)
    lines = []
    for i in range(rows):
        hard = i % 3 == 0
        template = rng.choice(HARD if hard else EASY)
        prompt = template.format(*([rng.choice(["Ann", "Bo", "3", "7", "Cy"])] * 2))
        cheap = ((not hard) and rng.random() < 0.95) or (hard and rng.random() < 0.1)
        strong = rng.random() < 0.95
        lines.append({"question": prompt, "small_ok": cheap, "big_ok": strong})
    if jsonl:
        path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    else:
        text = "question,small_ok,big_ok\n" + "".join(
            f'"{r["question"]}",{r["small_ok"]},{r["big_ok"]}\n' for r in lines
        )
        path.write_text(text)
    return path


COLUMNS = ["--prompt-col", "question", "--cheap-col", "small_ok", "--strong-col", "big_ok"]


def test_train_then_eval(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    train_file = labelled(tmp_path / "train.csv")
    out = tmp_path / "router.json"
    names = ["--cheap-model", "mini", "--strong-model", "big", "--folds", "3"]
    assert main(["router", "train", str(train_file), "-o", str(out), *COLUMNS, *names]) == 0
    printed = capsys.readouterr().out
    assert "trained on 90 rows" in printed
    router, _ = load(out)
    assert (router.models.cheap, router.models.strong) == ("mini", "big")
    assert router.training["labels"] == "train.csv"
    # --json: what was trained, one document on stdout; the file written is the same router
    again = tmp_path / "again.json"
    assert main(["router", "train", str(train_file), "-o", str(again), *COLUMNS, *names,
                 "--json"]) == 0  # fmt: skip
    printed, err = capsys.readouterr()
    trained = json.loads(printed)
    assert trained["router"] == {"file": str(again), "cheap": "mini", "strong": "big"}
    assert (trained["rows"], trained["threshold"], trained["held_out"]) == (
        90, router.threshold, None)  # fmt: skip
    assert trained["cheap_accuracy"] < trained["strong_accuracy"]
    assert {"target_quality", "retention_at_threshold", "saving_at_threshold"} < trained.keys()
    assert err == ""
    test_file = labelled(tmp_path / "test.jsonl", rows=60, seed=1, jsonl=True)
    report = tmp_path / "eval.json"
    assert main(["router", "eval", str(test_file), "--router", str(out), *COLUMNS,
                 "--json-out", str(report)]) == 0  # fmt: skip
    printed = capsys.readouterr().out
    assert "saving at 95.0% of strong quality" in printed
    assert "at the configured threshold" in printed
    assert "warning" not in printed
    numbers = json.loads(report.read_text())
    # The maths prompts are easy to tell apart: the router beats random routing on unseen rows.
    assert numbers["saving_at_target"] > numbers["random_saving_at_target"]
    assert numbers["retention_at_threshold"] >= 0.9
    assert len(numbers["curve"]) == 11
    assert main(["router", "eval", str(train_file), "--router", str(out), *COLUMNS]) == 0
    assert "trained on these very rows" in capsys.readouterr().out
    # As `learned.target_quality` does: the file's own threshold for another target.
    loose = tmp_path / "loose.json"
    assert main(["router", "eval", str(test_file), "--router", str(out), *COLUMNS,
                 "--target-quality", "0.5", "--json-out", str(loose)]) == 0  # fmt: skip
    capsys.readouterr()
    assert json.loads(loose.read_text())["threshold"] == router.threshold_for(0.5)[0]
    # --json: the numbers alone on stdout, one document (`| jq` works)
    assert main(["router", "eval", str(test_file), "--router", str(out), *COLUMNS,
                 "--target-quality", "0.5", "--json"]) == 0  # fmt: skip
    assert json.loads(capsys.readouterr().out) == json.loads(loose.read_text())


def test_the_models_named_choose_the_columns() -> None:
    """`--cheap-model fast` reads `fast_correct`: the aliases a route will name are the models
    the labels are for (README: `router train labels.csv --cheap-model fast ...`)."""

    def columns(cheap: str | None = None, strong: str | None = None, **given: str | None) -> Any:
        args = argparse.Namespace(cheap_model=None, strong_model=None, cheap_col=None,
                                  strong_col=None)  # fmt: skip
        vars(args).update(given)
        name_columns(args, cheap=cheap, strong=strong)
        return args.cheap_col, args.strong_col

    assert columns(cheap_model="fast", strong_model="smart") == ("fast_correct", "smart_correct")
    # eval --router: the file's models, unless a column or a model is named.
    assert columns("mini", "big") == ("mini_correct", "big_correct")
    assert columns("mini", "big", strong_col="ok") == ("mini_correct", "ok")
    assert columns("mini", "big", cheap_model="fast") == ("fast_correct", "big_correct")
    assert columns() == ("mixtral_8x7b_correct", "gpt4_1106_correct")  # RouteLLM's


def test_bad_input_is_one_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = labelled(tmp_path / "l.csv", rows=30)
    out = tmp_path / "r.json"
    assert main(["router", "train", str(good), "-o", str(out)]) == 2
    assert "no column 'prompt'" in capsys.readouterr().err
    bad = tmp_path / "bad.csv"
    bad.write_text(good.read_text() + '"one more",perhaps,True\n')
    assert main(["router", "train", str(bad), "-o", str(out), *COLUMNS]) == 2
    assert "line 32" in capsys.readouterr().err
    broken = tmp_path / "broken.json"
    broken.write_text('{"format": "levergate-router", "version": 1}')
    assert main(["router", "eval", str(good), "--router", str(broken), *COLUMNS]) == 2
    assert "broken.json is malformed" in capsys.readouterr().err
    assert main(["router", "train", str(good), "-o", str(out), *COLUMNS, "--folds", "1"]) == 2
