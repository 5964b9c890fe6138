"""Reading batch input files and writing their result lines — pure, and never a whole file.

Two passes, two kinds of verdict:

- At upload (`scan_upload`, in a worker thread, line by line from disk) the file as a whole:
  every non-blank line must be a JSON object with a string `custom_id`, unique in the file,
  at most `max_lines` lines of at most `max_line_bytes` each. Anything else refuses the
  upload with a 400 that names the line: the file is not a batch file, and an error file could
  not even name a line that has no `custom_id`.
- When a batch starts (`validate_line`) each line against the batch: `method` POST, `url` the
  batch's endpoint, a `body` the endpoint accepts (`check_body`, the same check the HTTP
  routes make), not streamed. A line that fails becomes an error-file line at once and the
  others run: nothing accepted is dropped.

Result lines have OpenAI's shape: `{"id", "custom_id", "response": {"status_code",
"request_id", "body"} | null, "error": {"code", "message"} | null}`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from levergate.batch.model import ENDPOINTS, LineRow, new_id
from levergate.config import MAX_JSON_DEPTH, RequestLimitsSettings
from levergate.core.json_bound import TooDeep, parse_json, too_deep
from levergate.errors import BadRequest
from levergate.protocol.openai.body import check_body


@dataclass(frozen=True, slots=True)
class FileBounds:
    max_lines: int
    max_line_bytes: int
    max_custom_id_chars: int


def _lines(path: Path, *, max_line_bytes: int) -> Iterator[tuple[int, bytes]]:
    """(1-based line number, line) for every non-blank line, each read alone."""
    with path.open("rb") as source:
        number = 0
        while True:
            line = source.readline(max_line_bytes + 1)
            if not line:
                return
            number += 1
            if len(line) > max_line_bytes and not line.endswith(b"\n"):
                raise BadRequest(
                    f"Line {number} is longer than {max_line_bytes} bytes.",
                    code="line_too_long",
                    param="file",
                )
            if line.strip():
                yield number, line


def scan_upload(path: Path, *, bounds: FileBounds) -> int:
    """The number of request lines in an uploaded batch file; BadRequest if it is not one."""
    seen: set[str] = set()
    for number, line in _lines(path, max_line_bytes=bounds.max_line_bytes):
        try:
            parsed = parse_json(line)
        except TooDeep as exc:
            raise BadRequest(
                f"Line {number} nests arrays and objects deeper than {exc.limit} levels, the most "
                "this gateway accepts.",
                code="json_too_deep",
                param="file",
            ) from None
        except orjson.JSONDecodeError:
            raise BadRequest(
                f"The file is not JSONL: line {number} is not valid JSON.",
                code="invalid_jsonl",
                param="file",
            ) from None
        custom_id = parsed.get("custom_id") if isinstance(parsed, dict) else None
        if not isinstance(custom_id, str) or not custom_id:
            raise BadRequest(
                f"Line {number} has no 'custom_id' string.", code="missing_custom_id", param="file"
            )
        if len(custom_id) > bounds.max_custom_id_chars:
            raise BadRequest(
                f"Line {number}: 'custom_id' is longer than {bounds.max_custom_id_chars} "
                "characters.",
                code="invalid_custom_id",
                param="file",
            )
        if custom_id in seen:
            raise BadRequest(
                f"Line {number} repeats the custom_id {custom_id[:64]!r}; each must be unique.",
                code="duplicate_custom_id",
                param="file",
            )
        seen.add(custom_id)
        if len(seen) > bounds.max_lines:
            raise BadRequest(
                f"The file has more than {bounds.max_lines} requests.",
                code="too_many_requests",
                param="file",
            )
    if not seen:
        raise BadRequest("The file holds no requests.", code="empty_file", param="file")
    return len(seen)


def read_rows(
    path: Path, *, endpoint: str, bounds: FileBounds, limits: RequestLimitsSettings, chunk: int
) -> Iterator[list[LineRow]]:
    """The file's lines validated against the batch, `chunk` rows at a time."""
    rows: list[LineRow] = []
    for idx, (number, line) in enumerate(_lines(path, max_line_bytes=bounds.max_line_bytes)):
        rows.append(validate_line(line, idx=idx, number=number, endpoint=endpoint, limits=limits))
        if len(rows) >= chunk:
            yield rows
            rows = []
    if rows:
        yield rows


def validate_line(
    line: bytes, *, idx: int, number: int, endpoint: str, limits: RequestLimitsSettings
) -> LineRow:
    """One line as a row to run, or as a row whose error line is already written."""
    # scan_upload proved it is an object with a custom_id; a file scanned before the depth
    # bound existed may still nest deeper, and fails alone here, never the runner.
    parsed = orjson.loads(line)
    custom_id = str(parsed["custom_id"])

    def refused(message: str, code: str = "invalid_request") -> LineRow:
        text = f"Line {number}: {message}"
        return LineRow(idx, custom_id, None, error_line(custom_id, code=code, message=text))

    if too_deep(parsed, limit=MAX_JSON_DEPTH, text=line):
        return refused(f"the line nests deeper than {MAX_JSON_DEPTH} levels.", "json_too_deep")
    if parsed.get("method") != "POST":
        return refused("'method' must be \"POST\".")
    if parsed.get("url") != endpoint:
        return refused(f"'url' must be the batch's endpoint {endpoint!r}.", "invalid_url")
    body = parsed.get("body")
    if not isinstance(body, dict):
        return refused("'body' must be a JSON object.")
    if body.get("stream") is True:
        return refused("batch requests cannot be streamed ('stream': true).")
    try:
        check_body(ENDPOINTS[endpoint], body, limits=limits)
    except BadRequest as exc:
        return refused(exc.message, exc.code or "invalid_request")
    return LineRow(idx, custom_id, orjson.dumps(body))


def output_line(
    custom_id: str, *, request_id: str, status: int, body: Any, error: dict[str, Any] | None
) -> bytes:
    """A line that reached the pipeline: its answer (2xx, output file) or its error (error file)."""
    response = {"status_code": status, "request_id": request_id, "body": body}
    return orjson.dumps(
        {"id": new_id("batch_req"), "custom_id": custom_id, "response": response, "error": error}
    )


def error_line(custom_id: str, *, code: str, message: str) -> bytes:
    """A line that never reached the pipeline (refused, cancelled, expired): error file."""
    error = {"code": code, "message": message}
    return orjson.dumps(
        {"id": new_id("batch_req"), "custom_id": custom_id, "response": None, "error": error}
    )
