"""`levergate cache threshold | rollback` over a request log file: the curve, the choice, the
refusals (too few verifications, naming the minimum; a named threshold above the target, naming
it; bad flags) and the install and rollback of the thresholds file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from levergate.cli.main import main
from levergate.layers.cache.thresholds import load
from levergate.layers.measure.shadow_labels import ShadowLabel
from levergate.requestlog.labels import label_row
from levergate.requestlog.store import SqliteLog


def verification(
    n: int, similarity: float | None, result: str, *, route: str = "faq"
) -> tuple[object, ...]:
    label = ShadowLabel(f"r{n}", "semantic", route, "cache", route, result, "normalized", None,
                        "q", "", None, "acme", "", similarity,
                        json.dumps({"threshold": 0.95, "floor": 0.85}))  # fmt: skip
    return label_row(1_000_000.0 + n, label, None)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """120 agreeing verifications at 0.90-0.99, 10 false hits at 0.86-0.88, 50 `none`."""
    rows = [verification(i, 0.90 + (i % 10) / 100, "agree") for i in range(120)]
    rows += [verification(200 + i, 0.86 + (i % 3) / 100, "disagree") for i in range(10)]
    rows += [verification(300 + i, None, "none") for i in range(50)]
    rows += [verification(400, 0.5, "disagree", route="other")]
    path = tmp_path / "log.sqlite3"
    store = SqliteLog(str(path), timeout_seconds=5)
    store.write_labels(rows)
    store.close()
    return path


def run(capsys: pytest.CaptureFixture[str], *args: str, expect: int = 0) -> tuple[str, str]:
    code = main(["cache", *args])
    out, err = capsys.readouterr()
    assert code == expect, (args, out, err)
    return out, err


def test_the_curve_and_the_choice_are_printed_and_installed(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = tmp_path / "thresholds.json"
    flags = ("--route", "faq", "--db", str(db), "--file", str(file))
    # The default holds the rate's 95% upper bound to the target: 0 of 120 at 0.90 is up to 3.1%.
    out, _ = run(capsys, "threshold", *flags, "--target-false-hit", "0.05")
    assert "route faq: 180 sampled lookups" in out
    assert "0.9000" in out
    assert "<- chosen" in out
    assert "<- current" in out
    assert load(file).routes["faq"].threshold == pytest.approx(0.90)
    assert load(file).routes["faq"].previous == 0.95
    # Lenient enough for the false hits: the lowest verified similarity.
    report = json.loads(run(capsys, "threshold", *flags, "--target-false-hit", "0.1", "--by",
                            "estimate", "--json")[0])  # fmt: skip
    assert report["chosen"]["threshold"] == pytest.approx(0.86)
    assert report["chosen"]["false_hits"] == 10
    assert report["current"]["threshold"] == pytest.approx(0.90)  # the file's, now
    out, _ = run(capsys, "rollback", "--route", "faq", "--file", str(file))
    assert "rolled back: faq -> 0.9000" in out
    assert load(file).routes["faq"].threshold == pytest.approx(0.90)
    # --json: the threshold now served and the one it replaced; a second rollback undoes the first
    out, err = run(capsys, "rollback", "--route", "faq", "--file", str(file), "--json")
    assert json.loads(out) == {"route": "faq", "file": str(file), "threshold": pytest.approx(0.86),
                               "previous": pytest.approx(0.90)}  # fmt: skip
    assert err == ""
    assert load(file).routes["faq"].threshold == pytest.approx(0.86)


def test_refusals_name_what_is_wrong(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = tmp_path / "thresholds.json"
    flags = ("--route", "faq", "--db", str(db), "--file", str(file))
    _, err = run(capsys, "threshold", *flags, "--target-false-hit", "0.02",
                 "--min-verifications", "500", expect=2)  # fmt: skip
    assert ("route 'faq' has 130 verified semantic cache lookups in the log; at least 500 are "
            "needed (--min-verifications)") in err  # fmt: skip
    out, _ = run(capsys, "threshold", *flags, "--target-false-hit", "0.02", "--threshold",
                 "0.86", "--by", "estimate", expect=1)  # fmt: skip
    assert ("refused: threshold 0.8600 has a measured false-hit rate of 7.69%, above the target "
            "2.00%") in out  # fmt: skip
    out, _ = run(capsys, "threshold", *flags, "--target-false-hit", "0.02", expect=1)
    assert ("refused: no threshold has a false-hit rate whose 95% upper bound is at most "
            "2.00% on at least 100 verified hits") in out  # fmt: skip
    out, _ = run(capsys, "threshold", *flags, "--target-false-hit", "0.02", "--threshold",
                 "0.9", expect=1)  # fmt: skip
    assert "upper bound of the false-hit rate of 3.10%, above the target 2.00%" in out
    assert not file.exists()
    _, err = run(capsys, "threshold", "--route", "other", "--db", str(db), "--file", str(file),
                 "--target-false-hit", "0.02", expect=2)  # fmt: skip
    assert "has 1 verified semantic cache lookups" in err
    for flag, value, why in (("--target-false-hit", "1.5", "--target-false-hit must be"),
                             ("--min-verifications", "0", "--min-verifications must be"),
                             ("--threshold", "0", "--threshold must be")):  # fmt: skip
        wanted = {"--target-false-hit": "0.02", flag: value}
        given = [x for pair in wanted.items() for x in pair]
        _, err = run(capsys, "threshold", *flags, *given, expect=2)
        assert why in err
    _, err = run(capsys, "threshold", "--route", "faq", "--db", str(db),
                 "--target-false-hit", "0.02", expect=2)  # fmt: skip
    assert "no thresholds file to install into" in err
    out, _ = run(capsys, "threshold", "--route", "faq", "--db", str(db),
                 "--target-false-hit", "0.05", "--dry-run")  # fmt: skip
    assert "dry run: nothing installed" in out
    _, err = run(capsys, "rollback", "--route", "faq", "--file", str(file), expect=2)
    assert f"no thresholds file at {file}" in err
