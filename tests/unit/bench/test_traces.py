"""Trace readers on small synthetic files, and on the first lines of the real public traces."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from levergate.bench.traces import (
    TRACE_NAMES,
    TraceRecord,
    default_data_dirs,
    load_trace,
    read_azure,
    read_mooncake,
    read_trace,
    resolve_trace,
)
from levergate.errors import ConfigError

AZURE = (
    "TIMESTAMP,ContextTokens,GeneratedTokens\r\n"
    "2023-11-16 18:17:03.9799600,4808,10\r\n"
    "2023-11-16 18:17:04.0319600,3180,8\r\n"
    "2023-11-16 18:18:03.9799600,12,300\r\n"
)
MOONCAKE = (
    '{"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1, 2]}\n'
    '{"timestamp": 1500, "input_length": 700, "output_length": 3, "hash_ids": [0, 4]}\n'
    "\n"
    '{"timestamp": 1250, "input_length": 10, "output_length": 1}\n'
)


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode())
    return path


def test_azure_offsets_are_relative_to_the_first_row_with_100ns_digits(tmp_path: Path) -> None:
    records = list(read_azure(write(tmp_path, "t.csv", AZURE)))
    assert [r.input_tokens for r in records] == [4808, 3180, 12]
    assert [r.output_tokens for r in records] == [10, 8, 300]
    assert [r.offset_s for r in records] == pytest.approx([0.0, 0.052, 60.0])


def test_azure_across_midnight(tmp_path: Path) -> None:
    text = (
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 23:59:59.5,1,1\n"
        "2023-11-17 00:00:00.25,2,2\n"
    )
    records = list(read_azure(write(tmp_path, "t.csv", text)))
    assert records[1].offset_s == pytest.approx(0.75)


def test_mooncake_milliseconds_and_prefix_blocks(tmp_path: Path) -> None:
    records = list(read_mooncake(write(tmp_path, "t.jsonl", MOONCAKE)))
    assert records[0] == TraceRecord(0.0, 6758, 500, (0, 1, 2))
    assert records[1] == TraceRecord(1.5, 700, 3, (0, 4))
    assert records[2].hash_ids == ()


def test_load_sorts_shifts_and_scales(tmp_path: Path) -> None:
    records = load_trace(read_trace(write(tmp_path, "t.jsonl", MOONCAKE)), time_scale=0.5)
    assert [r.offset_s for r in records] == pytest.approx([0.0, 0.625, 0.75])
    assert [r.input_tokens for r in records] == [6758, 10, 700]
    assert load_trace([]) == []


def test_the_suffix_picks_the_reader(tmp_path: Path) -> None:
    assert next(read_trace(write(tmp_path, "a.csv", AZURE))).input_tokens == 4808
    assert next(read_trace(write(tmp_path, "a.jsonl", MOONCAKE))).input_tokens == 6758
    with pytest.raises(ConfigError, match="format"):
        read_trace(write(tmp_path, "a.txt", AZURE))


def test_malformed_files_name_the_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not an Azure"):
        list(read_azure(write(tmp_path, "b.csv", "when,what\n1,2\n")))
    with pytest.raises(ConfigError, match=":3:"):
        list(read_azure(write(tmp_path, "c.csv", AZURE[:80] + "\nnot-a-time,1,2\n")))
    with pytest.raises(ConfigError, match=":2:"):
        list(
            read_mooncake(
                write(
                    tmp_path,
                    "d.jsonl",
                    '{"timestamp": 0, "input_length": 1, "output_length": 1}\n{"timestamp": 1}\n',
                )
            )
        )


def test_names_resolve_inside_the_data_dir_and_paths_pass_through(tmp_path: Path) -> None:
    target = tmp_path / TRACE_NAMES["mooncake"]
    target.parent.mkdir(parents=True)
    target.write_text(MOONCAKE)
    assert resolve_trace("mooncake", data_dir=tmp_path) == target
    assert resolve_trace(str(target)) == target
    with pytest.raises(ConfigError, match="not found"):
        resolve_trace("azure", data_dir=tmp_path)
    with pytest.raises(ConfigError, match="neither a file"):
        resolve_trace(str(tmp_path / "missing.csv"))


def test_default_data_dir_is_next_to_the_project_root() -> None:
    project = Path(__file__).resolve().parents[3]
    assert project.parent / "shared" / "data" in default_data_dirs()


@pytest.mark.parametrize("name", ["azure", "azure-code", "mooncake", "mooncake-synthetic"])
def test_the_real_traces_read_from_the_shared_data_directory(name: str) -> None:
    """The public traces sit in ../shared/data on every dev and CI machine: read their start."""
    first = list(itertools.islice(read_trace(resolve_trace(name)), 200))
    assert len(first) == 200
    assert first[0].offset_s == 0.0
    assert all(b.offset_s >= a.offset_s for a, b in itertools.pairwise(first))
    assert all(r.input_tokens > 0 and r.output_tokens >= 0 for r in first)
    if name.startswith("mooncake"):
        assert all(r.hash_ids for r in first)
