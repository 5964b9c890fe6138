"""`levergate router eval --confidence-col`: a cascade's confidence evaluated on labelled rows."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from levergate.cli.main import main

COLUMNS = ["--prompt-col", "question", "--cheap-col", "small_ok", "--strong-col", "big_ok"]


def labelled(path: Path, rows: int = 300, *, seed: int = 0) -> Path:
    """Rows whose mean logprob is high where the cheap model was right and low where it was
    wrong, with noise so the two overlap: an informative, imperfect confidence."""
    rng = random.Random(seed)
    lines = ["question,small_ok,big_ok,lp"]
    for i in range(rows):
        cheap = rng.random() < 0.7
        strong = rng.random() < 0.9
        lp = min(0.0, rng.gauss(-0.2, 0.15) if cheap else rng.gauss(-0.9, 0.3))
        lines.append(f"q{i},{cheap},{strong},{lp:.4f}")
    path.write_text("\n".join(lines) + "\n")
    return path


def run(args: list[str], tmp_path: Path) -> dict[str, object]:
    out = tmp_path / "report.json"
    assert main(["router", "eval", *args, *COLUMNS, "--json-out", str(out)]) == 0
    numbers: dict[str, object] = json.loads(out.read_text())
    return numbers


def test_an_informative_confidence_beats_random_escalation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = labelled(tmp_path / "l.csv")
    r = run([str(data), "--confidence-col", "lp"], tmp_path)
    printed = capsys.readouterr().out
    assert "escalating a row when its score < the threshold" in printed
    assert "cost: strong calls only (RouteLLM's convention" in printed
    assert "at 95.0% of strong quality: cascade escalates" in printed
    assert "chosen on these very rows" in printed
    assert r["mode"] == "cascade"
    assert r["rows"] == 300
    assert r["cheap_cost"] == 0.0
    curve = r["curve"]
    assert isinstance(curve, list)
    assert len(curve) == 11
    assert (curve[0]["escalation"], curve[-1]["escalation"]) == (0.0, 1.0)
    assert curve[-1]["retention"] == pytest.approx(1.0)
    # The low scores are the wrong cheap answers: escalating them beats escalating at random.
    assert all(p["retention"] > p["random_retention"] for p in curve[2:5])
    assert r["saving_at_target"] > r["random_saving_at_target"]  # type: ignore[operator]
    assert r["oracle_saving_at_target"] >= r["saving_at_target"]  # type: ignore[operator]
    # The threshold the target picks keeps the target on these rows, and says what it costs.
    assert r["retention_at_threshold"] >= 0.95  # type: ignore[operator]
    assert r["escalation_at_threshold"] == r["escalation_at_target"]
    assert r["saving_at_threshold"] == pytest.approx(1 - r["escalation_at_threshold"])  # type: ignore[operator]
    oracle = r["oracle_all_wrong"]
    assert isinstance(oracle, dict)
    assert oracle["retention"] >= 1.0


def test_a_given_threshold_and_the_cheap_calls_cost(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = labelled(tmp_path / "l.csv")
    free = run([str(data), "--confidence-col", "lp", "--threshold", "-0.5"], tmp_path)
    paid = run([str(data), "--confidence-col", "lp", "--threshold", "-0.5", "--cheap-cost",
                "0.1"], tmp_path)  # fmt: skip
    printed = capsys.readouterr().out
    assert "at the given threshold -0.5000" in printed
    assert "the cheap call on every row at 10.0% of a strong call" in printed
    assert "chosen on these very rows" not in printed.split("10.0% of a strong call")[1]
    assert paid["threshold"] == free["threshold"] == -0.5
    assert paid["escalation_at_threshold"] == free["escalation_at_threshold"]
    for key in ("saving_at_threshold", "saving_at_target", "random_saving_at_target"):
        assert paid[key] == pytest.approx(free[key] - 0.1)  # type: ignore[operator]
    loose = run([str(data), "--confidence-col", "lp", "--target-quality", "0.8"], tmp_path)
    assert loose["target_quality"] == 0.8
    assert loose["escalation_at_target"] < free["escalation_at_target"]  # type: ignore[operator]


def test_a_score_equal_to_the_threshold_is_accepted(tmp_path: Path) -> None:
    data = tmp_path / "tiny.jsonl"
    rows = [(-2.0, False, True), (-1.0, False, False), (-1.0, True, True), (-0.1, True, True)]
    data.write_text("".join(json.dumps({"question": f"q{i}", "small_ok": c, "big_ok": s,
                                        "lp": lp}) + "\n"
                            for i, (lp, c, s) in enumerate(rows)))  # fmt: skip
    r = run([str(data), "--confidence-col", "lp", "--threshold", "-1.0"], tmp_path)
    assert r["escalation_at_threshold"] == 0.25  # only the row below -1.0
    assert r["retention_at_threshold"] == 1.0  # 3 of 4 right, as the strong model
    assert r["escalation_at_target"] == 0.25
    assert r["oracle_escalation_at_target"] == 0.25


@pytest.mark.parametrize(
    ("line", "text", "error"),
    [
        (1, "question,small_ok,big_ok,conf", "no column 'lp'"),
        (9, "q7,True,True,high", "line 9: 'lp' must be a finite number, not 'high'"),
        (4, "q2,True,False,nan", "line 4: 'lp' must be a finite number"),
        (6, "q4,True,False,-inf", "line 6: 'lp' must be a finite number"),
        (3, "q1,True,False,", "line 3: 'lp' must be a finite number"),
    ],
)
def test_a_broken_confidence_column_is_one_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], line: int, text: str, error: str
) -> None:
    lines = labelled(tmp_path / "l.csv", rows=20).read_text().splitlines()
    lines[line - 1] = text
    bad = tmp_path / "bad.csv"
    bad.write_text("\n".join(lines) + "\n")
    assert main(["router", "eval", str(bad), *COLUMNS, "--confidence-col", "lp"]) == 2
    assert error in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flags", "error"),
    [
        (["--confidence-col", "lp", "--router", "r.json"], "one of --router FILE"),
        ([], "one of --router FILE"),
        (["--confidence-col", "lp", "--cheap-cost", "1"], "--cheap-cost must be at least 0"),
        (["--confidence-col", "lp", "--cheap-cost", "-0.1"], "--cheap-cost must be at least 0"),
        (["--confidence-col", "lp", "--cheap-cost", "nan"], "--cheap-cost must be at least 0"),
        (["--router", "r.json", "--cheap-cost", "0.1"], "--cheap-cost prices a cascade"),
        (["--confidence-col", "lp", "--threshold", "nan"], "--threshold must be a finite"),
        (["--confidence-col", "lp", "--target-quality", "0"], "--target-quality must be above"),
        (["--confidence-col", "lp", "--target-quality", "1.5"], "--target-quality must be"),
        # eval embeds as the router file says: a token limit of its own would be ignored
        (["--router", "r.json", "--max-tokens", "64"], "--max-tokens is a `router train`"),
        (["--confidence-col", "lp", "--max-tokens", "64"], "--max-tokens is a `router train`"),
    ],
)
def test_bad_flags_are_one_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], error: str
) -> None:
    good = labelled(tmp_path / "l.csv", rows=20)
    assert main(["router", "eval", str(good), *COLUMNS, *flags]) == 2
    assert error in capsys.readouterr().err


def test_no_strong_answer_right_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "l.csv"
    data.write_text("question,small_ok,big_ok,lp\nq,True,False,-0.1\n")
    assert main(["router", "eval", str(data), *COLUMNS, "--confidence-col", "lp"]) == 2
    assert "the strong model is right on no row" in capsys.readouterr().err
