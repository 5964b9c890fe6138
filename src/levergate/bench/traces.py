"""Readers for public production traces: each yields (arrival offset, input tokens, output tokens).

Two formats are understood, both read-only at run time from where they sit (never copied):

- Azure LLM inference trace 2023 (Splitwise): CSV `TIMESTAMP,ContextTokens,GeneratedTokens` with
  timestamps like `2023-11-16 18:17:03.9799600` (100 ns digits, CRLF line ends).
- Mooncake FAST'25 traces: JSONL `{"timestamp": ms, "input_length", "output_length",
  "hash_ids"}`, where equal `hash_ids` mark shared 512-token prefix blocks. We keep them so the
  workload can rebuild prompts that share prefixes exactly where production ones did.

Short names (`azure`, `mooncake`, ...) resolve inside the shared data directory, by default
`<project root>/../shared/data`; anything else is a path whose suffix picks the reader.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime as dt
from collections.abc import Iterable, Iterator
from pathlib import Path

import orjson

from levergate.core.json_bound import parse_json
from levergate.errors import ConfigError

MOONCAKE_BLOCK_TOKENS = 512

TRACE_NAMES: dict[str, str] = {
    "azure": "azure_llm_trace_2023/AzureLLMInferenceTrace_conv.csv",
    "azure-conv": "azure_llm_trace_2023/AzureLLMInferenceTrace_conv.csv",
    "azure-code": "azure_llm_trace_2023/AzureLLMInferenceTrace_code.csv",
    "mooncake": "mooncake_traces/conversation_trace.jsonl",
    "mooncake-conversation": "mooncake_traces/conversation_trace.jsonl",
    "mooncake-synthetic": "mooncake_traces/synthetic_trace.jsonl",
}


@dataclasses.dataclass(frozen=True, slots=True)
class TraceRecord:
    """One request of a trace. `offset_s` is seconds since the trace's first request."""

    offset_s: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()


def read_azure(path: Path) -> Iterator[TraceRecord]:
    """Rows in file order; offsets are relative to the first row (the files are time-sorted)."""
    with path.open(newline="", encoding="utf-8") as handle:
        rows = csv.reader(handle)
        header = [name.strip().lower() for name in next(rows, [])]
        try:
            at = header.index("timestamp")
            inp = header.index("contexttokens")
            out = header.index("generatedtokens")
        except ValueError:
            raise ConfigError(
                f"bench: {path} is not an Azure LLM trace "
                "(expected header TIMESTAMP,ContextTokens,GeneratedTokens)"
            ) from None
        first: tuple[int, float] | None = None
        for line, row in enumerate(rows, start=2):
            if not row:
                continue
            try:
                day, seconds = _azure_time(row[at])
                record = (int(row[inp]), int(row[out]))
            except (ValueError, IndexError) as exc:
                raise ConfigError(f"bench: {path}:{line}: bad row {row!r} ({exc})") from None
            if first is None:
                first = (day, seconds)
            offset = (day - first[0]) * 86400 + (seconds - first[1])
            yield TraceRecord(offset, record[0], record[1])


def _azure_time(stamp: str) -> tuple[int, float]:
    """(day ordinal, seconds of the day). Parsed by hand because the trace carries 7 fractional
    digits, more than `datetime.fromisoformat` accepts on 3.11; the day is kept apart so that
    sub-microsecond digits are not lost to float precision at epoch-sized magnitudes."""
    day, _, clock = stamp.strip().partition(" ")
    hours, minutes, seconds = clock.split(":")
    return dt.date.fromisoformat(day).toordinal(), int(hours) * 3600 + int(minutes) * 60 + float(
        seconds
    )


def read_mooncake(path: Path) -> Iterator[TraceRecord]:
    """Lines in file order; `timestamp` (ms) is already relative to the trace start."""
    with path.open("rb") as handle:
        for line_no, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                item = parse_json(line)
                yield TraceRecord(
                    float(item["timestamp"]) / 1000.0,
                    int(item["input_length"]),
                    int(item["output_length"]),
                    tuple(int(block) for block in item.get("hash_ids", ())),
                )
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
                raise ConfigError(
                    f"bench: {path}:{line_no}: not a Mooncake record ({exc})"
                ) from None


def read_trace(path: Path) -> Iterator[TraceRecord]:
    """Pick the reader by suffix: `.csv` is Azure-style, `.jsonl`/`.json` Mooncake-style."""
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return read_azure(path)
    if suffix in (".jsonl", ".json"):
        return read_mooncake(path)
    raise ConfigError(f"bench: cannot tell the trace format of {path} (want .csv or .jsonl)")


def load_trace(records: Iterable[TraceRecord], *, time_scale: float = 1.0) -> list[TraceRecord]:
    """Sorted by arrival, shifted to start at 0, and with offsets multiplied by `time_scale`
    (0.1 replays ten times faster, 2 at half speed). Token counts are kept as recorded."""
    ordered = sorted(records, key=lambda record: record.offset_s)
    if not ordered:
        return []
    start = ordered[0].offset_s
    return [
        dataclasses.replace(record, offset_s=(record.offset_s - start) * time_scale)
        for record in ordered
    ]


def resolve_trace(name: str, *, data_dir: Path | None = None) -> Path:
    """A short name inside the data directory, or a path to an existing file."""
    relative = TRACE_NAMES.get(name)
    if relative is None:
        path = Path(name).expanduser()
        if not path.is_file():
            known = ", ".join(TRACE_NAMES)
            raise ConfigError(f"bench: --trace {name!r} is neither a file nor one of: {known}")
        return path
    roots = [data_dir] if data_dir is not None else default_data_dirs()
    for root in roots:
        candidate = root / relative
        if candidate.is_file():
            return candidate
    tried = ", ".join(str(root / relative) for root in roots)
    raise ConfigError(f"bench: trace {name!r} not found (tried {tried}); pass --trace PATH")


def default_data_dirs() -> list[Path]:
    """`../shared/data` next to each project root that could be ours: the one holding this
    (editable) package, then the working directory and its parents."""
    roots: list[Path] = []
    for start in (Path(__file__).resolve(), Path.cwd().resolve()):
        for parent in (start, *start.parents):
            if (parent / "pyproject.toml").is_file():
                candidate = parent.parent / "shared" / "data"
                if candidate not in roots:
                    roots.append(candidate)
                break
    return roots
