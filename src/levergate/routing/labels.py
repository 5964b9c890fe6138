"""Labelled rows for the learned router: (prompt, cheap model correct, strong model correct).

CSV (header row) or JSONL (one object a line), chosen by the file's suffix. The column names
default to those of RouteLLM's MMLU release (`prompt`, `mixtral_8x7b_correct`,
`gpt4_1106_correct`) and are flags of `levergate router train|eval`, so any labelled set of the
same shape runs unchanged. A bad file is refused as a whole with the line that is wrong: a
router trained on half a file, silently, would promise a quality nobody measured.

`Columns.score` names one more, numeric column when set: a cascade's confidence in the cheap
answer (`levergate router eval --confidence-col`), read in the same pass. It must be a finite
number on every row: a missing score cannot be guessed offline without inventing the result.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from levergate.errors import ConfigError

DEFAULT_PROMPT = "prompt"
DEFAULT_CHEAP = "mixtral_8x7b_correct"
DEFAULT_STRONG = "gpt4_1106_correct"
MAX_ROWS = 2_000_000
MAX_PROMPT_CHARS = 200_000
_TRUE = {"true", "1", "yes", "1.0"}
_FALSE = {"false", "0", "no", "0.0"}


@dataclass(frozen=True, slots=True)
class Columns:
    prompt: str = DEFAULT_PROMPT
    cheap: str = DEFAULT_CHEAP
    strong: str = DEFAULT_STRONG
    score: str | None = None  # a numeric column (a cascade's confidence), when one is wanted


@dataclass(frozen=True)
class Labels:
    prompts: list[str]
    cheap: npt.NDArray[np.float64]  # 1.0 where the cheap model answered correctly
    strong: npt.NDArray[np.float64]
    source: str  # the file's name, recorded in the router file
    score: npt.NDArray[np.float64] | None = None  # the `Columns.score` column, when asked for

    def __len__(self) -> int:
        return len(self.prompts)

    def subset(self, index: npt.NDArray[np.intp]) -> Labels:
        score = None if self.score is None else self.score[index]
        return Labels([self.prompts[i] for i in index], self.cheap[index], self.strong[index],
                      self.source, score)  # fmt: skip


def read_labels(path: str | Path, columns: Columns | None = None) -> Labels:
    """Every row of a CSV or JSONL file (raises ConfigError naming the file and line)."""
    path, columns = Path(path), columns or Columns()
    try:
        with path.open(encoding="utf-8", newline="") as handle:
            jsonl = path.suffix.lower() in {".jsonl", ".ndjson"}
            rows: list[tuple[int, Mapping[str, Any]]] = []
            for item in _jsonl_rows(handle, path) if jsonl else _csv_rows(handle, path, columns):
                rows.append(item)
                if len(rows) > MAX_ROWS:
                    raise ConfigError(f"labels {path}: more than {MAX_ROWS} rows")
    except OSError as exc:
        raise ConfigError(f"cannot read labels {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"labels {path} is not UTF-8 text") from None
    if not rows:
        raise ConfigError(f"labels {path} holds no rows")
    prompts, cheap, strong, score = [], [], [], []
    for line, row in rows:
        prompts.append(_prompt(row, columns.prompt, path, line))
        cheap.append(_flag(row, columns.cheap, path, line))
        strong.append(_flag(row, columns.strong, path, line))
        if columns.score is not None:
            score.append(_number(row, columns.score, path, line))
    scores = np.array(score) if columns.score is not None else None
    return Labels(prompts, np.array(cheap), np.array(strong), path.name, scores)


def _csv_rows(handle: Any, path: Path, columns: Columns) -> Iterator[tuple[int, Mapping[str, Any]]]:
    csv.field_size_limit(MAX_PROMPT_CHARS * 4)
    reader = csv.DictReader(handle, strict=True)
    try:
        header = reader.fieldnames or []
    except csv.Error as exc:
        raise ConfigError(f"labels {path}, line 1: {exc}") from None
    wanted = (columns.prompt, columns.cheap, columns.strong, columns.score)
    missing = [c for c in wanted if c is not None and c not in header]
    if missing:
        flags = "--prompt-col / --cheap-col / --strong-col"
        raise ConfigError(
            f"labels {path} has no column {', '.join(map(repr, missing))} "
            f"(columns: {', '.join(header) or 'none'}); choose them with "
            + (flags + " / --confidence-col" if columns.score is not None else flags)
        )
    start = reader.line_num + 1
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise ConfigError(f"labels {path}, line {start}: {exc}") from None
        if None in row or any(v is None for v in row.values()):
            raise ConfigError(
                f"labels {path}, line {start}: {len(header)} columns expected, got another number"
            )
        yield start, row
        start = reader.line_num + 1


def _jsonl_rows(handle: Any, path: Path) -> Iterator[tuple[int, Mapping[str, Any]]]:
    for number, text in enumerate(handle, start=1):
        if not text.strip():
            continue
        try:
            row = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"labels {path}, line {number}: not JSON ({exc.msg})") from None
        if not isinstance(row, dict):
            raise ConfigError(f"labels {path}, line {number}: each line must be a JSON object")
        yield number, row


def _prompt(row: Mapping[str, Any], column: str, path: Path, line: int) -> str:
    if column not in row:
        raise ConfigError(f"labels {path}, line {line}: no {column!r}")
    value = row[column]
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"labels {path}, line {line}: {column!r} must be non-empty text")
    if len(value) > MAX_PROMPT_CHARS:
        raise ConfigError(
            f"labels {path}, line {line}: {column!r} is longer than {MAX_PROMPT_CHARS} characters"
        )
    return value


def _flag(row: Mapping[str, Any], column: str, path: Path, line: int) -> float:
    if column not in row:
        raise ConfigError(f"labels {path}, line {line}: no {column!r}")
    value = row[column]
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int) and value in {0, 1}:
        return float(value)
    text = str(value).strip().lower() if isinstance(value, str) else None
    if text in _TRUE:
        return 1.0
    if text in _FALSE:
        return 0.0
    raise ConfigError(
        f"labels {path}, line {line}: {column!r} must be true/false or 1/0, not {value!r:.40}"
    )


def _number(row: Mapping[str, Any], column: str, path: Path, line: int) -> float:
    if column not in row:
        raise ConfigError(f"labels {path}, line {line}: no {column!r}")
    value = row[column]
    number: float | None = None
    if isinstance(value, int | float | str) and not isinstance(value, bool):
        try:
            number = float(value.strip() if isinstance(value, str) else value)
        except (ValueError, OverflowError):  # not a number; an integer past float's range
            number = None
    if number is None or not math.isfinite(number):
        raise ConfigError(
            f"labels {path}, line {line}: {column!r} must be a finite number, not {value!r:.40}"
        )
    return number
