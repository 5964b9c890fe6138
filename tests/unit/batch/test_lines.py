"""Input validation: the upload's whole-file verdict, each line's verdict, result shapes."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from levergate.batch.lines import FileBounds, read_rows, scan_upload, validate_line
from levergate.config import RequestLimitsSettings
from levergate.errors import BadRequest

BOUNDS = FileBounds(max_lines=3, max_line_bytes=4096, max_custom_id_chars=8)
CHAT = "/v1/chat/completions"


def good(custom_id: str) -> bytes:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    return orjson.dumps({"custom_id": custom_id, "method": "POST", "url": CHAT, "body": body})


def written(tmp_path: Path, *lines: bytes) -> Path:
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def test_a_good_file_counts_its_lines_and_skips_blank_ones(tmp_path: Path) -> None:
    assert scan_upload(written(tmp_path, good("a"), b"", good("b")), bounds=BOUNDS) == 2


@pytest.mark.parametrize(
    ("lines", "code"),
    [
        ((b"{not json",), "invalid_jsonl"),
        ((b"[1, 2]",), "missing_custom_id"),
        ((good("a"), good("a")), "duplicate_custom_id"),
        ((good("a"), good("b"), good("c"), good("d")), "too_many_requests"),
        ((good("much-too-long"),), "invalid_custom_id"),
        ((b"  ",), "empty_file"),
        ((b'{"custom_id": "' + b"x" * 5000 + b'"}',), "line_too_long"),
    ],
)
def test_files_that_are_not_batch_files_are_refused(
    tmp_path: Path, lines: tuple[bytes, ...], code: str
) -> None:
    with pytest.raises(BadRequest) as refused:
        scan_upload(written(tmp_path, *lines), bounds=BOUNDS)
    assert refused.value.code == code


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"method": "GET"}, "invalid_request"),
        ({"url": "/v1/embeddings"}, "invalid_url"),
        ({"body": "text"}, "invalid_request"),
        ({"body": {"model": "m", "messages": [], "stream": True}}, "invalid_request"),
        ({"body": {"messages": []}}, "invalid_request"),
        ({"body": {"model": "m", "messages": "hi"}}, "invalid_type"),
    ],
)
def test_a_bad_line_becomes_its_own_error_line(change: dict[str, object], code: str) -> None:
    line = orjson.dumps({**orjson.loads(good("x")), **change})
    row = validate_line(line, idx=4, number=5, endpoint=CHAT, limits=RequestLimitsSettings())
    assert row.request is None
    assert row.result is not None
    error = orjson.loads(row.result)
    assert error["custom_id"] == "x"
    assert error["response"] is None
    assert error["error"]["code"] == code
    assert error["error"]["message"].startswith("Line 5:")


def test_rows_come_in_chunks_in_input_order(tmp_path: Path) -> None:
    path = written(tmp_path, good("a"), good("b"), good("c"))
    chunks = list(
        read_rows(path, endpoint=CHAT, bounds=BOUNDS, limits=RequestLimitsSettings(), chunk=2)
    )
    assert [[r.custom_id for r in c] for c in chunks] == [["a", "b"], ["c"]]
    assert [r.idx for c in chunks for r in c] == [0, 1, 2]
    assert all(r.request is not None for c in chunks for r in c)
