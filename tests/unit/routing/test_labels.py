"""Labelled rows from CSV and JSONL: the defaults of the RouteLLM file, other columns by name,
and every bad file refused with the line that is wrong."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from levergate.errors import ConfigError
from levergate.routing.labels import Columns, read_labels

HEADER = "subject,prompt,mixtral_8x7b_correct,gpt4_1106_correct\n"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_csv_with_the_default_columns_and_multiline_prompts(tmp_path: Path) -> None:
    path = write(tmp_path, "l.csv", HEADER + 'a,"Q1\nA. x\nB. y",True,False\nb,Q2,0,1\n')
    labels = read_labels(path)
    assert labels.prompts == ["Q1\nA. x\nB. y", "Q2"]
    assert labels.cheap.tolist() == [1.0, 0.0]
    assert labels.strong.tolist() == [0.0, 1.0]
    assert labels.source == "l.csv"


def test_jsonl_with_chosen_columns(tmp_path: Path) -> None:
    path = write(tmp_path, "l.jsonl", '{"q": "hi", "small": true, "big": 1}\n\n'
                 '{"q": "yo", "small": "false", "big": false}\n')  # fmt: skip
    labels = read_labels(path, Columns(prompt="q", cheap="small", strong="big"))
    assert labels.prompts == ["hi", "yo"]
    assert labels.cheap.tolist() == [1.0, 0.0]
    assert labels.strong.tolist() == [1.0, 0.0]


def test_a_missing_column_names_it_and_the_flags(tmp_path: Path) -> None:
    path = write(tmp_path, "l.csv", "prompt,mixtral_8x7b_correct\nq,1\n")
    with pytest.raises(ConfigError, match=r"no column 'gpt4_1106_correct'.*--strong-col"):
        read_labels(path)


@pytest.mark.parametrize(
    ("text", "line", "what"),
    [
        (HEADER + "a,Q1,True,False\nb,Q2,maybe,True\n", 3, "true/false"),
        # The bad row starts on line 4, after a prompt spanning lines 2-3.
        (HEADER + 'a,"Q1\nmore",True,False\nb,,True,True\n', 4, "non-empty"),
        (HEADER + "a,Q1,True\n", 2, "columns expected"),
        (HEADER + "a,Q1,True,False,extra\n", 2, "columns expected"),
    ],
)
def test_a_malformed_csv_row_names_its_line(
    tmp_path: Path, text: str, line: int, what: str
) -> None:
    with pytest.raises(ConfigError, match=rf"line {line}: .*{what}"):
        read_labels(write(tmp_path, "l.csv", text))


@pytest.mark.parametrize(
    ("text", "line", "what"),
    [
        ('{"prompt": "a", "mixtral_8x7b_correct": 1, "gpt4_1106_correct": 0}\n{oops\n', 2, "JSON"),
        ('["a", 1, 0]\n', 1, "object"),
        ('{"prompt": "a", "mixtral_8x7b_correct": 2, "gpt4_1106_correct": 0}\n', 1, "true/false"),
        ('{"prompt": 5, "mixtral_8x7b_correct": 1, "gpt4_1106_correct": 0}\n', 1, "text"),
        ('{"prompt": "a", "gpt4_1106_correct": 0}\n', 1, "no 'mixtral_8x7b_correct'"),
    ],
)
def test_a_malformed_jsonl_row_names_its_line(
    tmp_path: Path, text: str, line: int, what: str
) -> None:
    with pytest.raises(ConfigError, match=rf"line {line}: .*{what}"):
        read_labels(write(tmp_path, "l.jsonl", text))


def test_empty_unreadable_and_binary_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no rows"):
        read_labels(write(tmp_path, "l.csv", HEADER))
    with pytest.raises(ConfigError, match="cannot read"):
        read_labels(tmp_path / "absent.csv")
    binary = tmp_path / "b.csv"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ConfigError, match="not UTF-8"):
        read_labels(binary)


def test_a_confidence_column_is_read_in_the_same_pass(tmp_path: Path) -> None:
    path = write(tmp_path, "l.csv", HEADER.strip() + ",lp\na,Q1,True,False, -0.25\nb,Q2,0,1,3\n")
    labels = read_labels(path, Columns(score="lp"))
    assert labels.score is not None
    assert labels.score.tolist() == [-0.25, 3.0]
    assert labels.subset(np.array([1])).score.tolist() == [3.0]  # type: ignore[union-attr]
    assert read_labels(path).score is None  # only when asked for
    jsonl = write(tmp_path, "l.jsonl", '{"prompt": "a", "mixtral_8x7b_correct": 1, '
                  '"gpt4_1106_correct": 0, "p": 0.9}\n')  # fmt: skip
    assert read_labels(jsonl, Columns(score="p")).score.tolist() == [0.9]  # type: ignore[union-attr]


def test_a_missing_confidence_column_names_its_flag(tmp_path: Path) -> None:
    path = write(tmp_path, "l.csv", HEADER + "a,Q1,True,False\n")
    with pytest.raises(ConfigError, match=r"no column 'lp'.*--confidence-col"):
        read_labels(path, Columns(score="lp"))


@pytest.mark.parametrize("value", ['"high"', "NaN", '"inf"', '"-Infinity"', "true", "null",
                                   "1" + "0" * 400, '""'])  # fmt: skip
def test_a_confidence_that_is_no_finite_number_names_its_line(tmp_path: Path, value: str) -> None:
    good = '{"prompt": "a", "mixtral_8x7b_correct": 1, "gpt4_1106_correct": 0, "p": 0.5}\n'
    bad = good.replace("0.5", value)
    path = write(tmp_path, "l.jsonl", good + bad)
    with pytest.raises(ConfigError, match=r"line 2: 'p' must be a finite number"):
        read_labels(path, Columns(score="p"))


def test_a_csv_confidence_that_is_no_number_names_its_line(tmp_path: Path) -> None:
    path = write(tmp_path, "l.csv", HEADER.strip() + ",lp\na,Q1,1,0,-1\nb,Q2,1,0,nan\n")
    with pytest.raises(ConfigError, match=r"line 3: 'lp' must be a finite number, not 'nan'"):
        read_labels(path, Columns(score="lp"))
    missing = write(tmp_path, "m.jsonl", '{"prompt": "a", "mixtral_8x7b_correct": 1, '
                    '"gpt4_1106_correct": 0}\n')  # fmt: skip
    with pytest.raises(ConfigError, match=r"line 1: no 'p'"):
        read_labels(missing, Columns(score="p"))
