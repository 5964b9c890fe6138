"""The fuzz generates what issue 20 asks of it (tests/fuzzing.py, tests/fuzz_shapes.py): JSON
nested at, just past and far past the bound (hundreds of levels and more), embeddings requests
heavy with copies (at the copy bound and past it), and hostile multipart: no close delimiter,
parts past the upload bound, and requests that stall mid-body. Measured on the bytes it sends,
not on what it meant to send."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from levergate.config import MAX_JSON_DEPTH, Settings
from levergate.core.json_bound import parse_json
from levergate.testing import fuzz_shapes
from levergate.testing.fuzzing import RawRequest, hostile_requests

COUNT = 6000


def depth(text: bytes) -> int:
    """The deepest nesting of arrays and objects in `text`, outside strings (valid or not)."""
    deepest = level = 0
    in_string = escaped = False
    for byte in text:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in b"[{":
            level += 1
            deepest = max(deepest, level)
        elif byte in b"]}":
            level -= 1
    return deepest


@pytest.fixture(scope="module")
def requests() -> list[RawRequest]:
    return list(itertools.islice(hostile_requests(seed=20), COUNT))


def test_depth_counts_nesting_outside_strings() -> None:
    assert depth(b'{"a": [[1], {"b": "[[[["}]}') == 3
    assert depth(b'"\\"[[["') == 0
    assert depth(b"[" * 300) == 300


def test_json_goes_deep_around_and_past_the_bound(requests: list[RawRequest]) -> None:
    depths = Counter(depth(r.body) for r in requests if r.path != "/v1/files")
    # Bodies hold the nesting a level or two below the top (a tool's schema, an input item).
    near = [d for d in depths if MAX_JSON_DEPTH - 4 <= d <= MAX_JSON_DEPTH]
    past = [d for d in depths if MAX_JSON_DEPTH < d <= MAX_JSON_DEPTH + 4]
    assert near, sorted(depths)
    assert past, sorted(depths)
    assert sum(n for d, n in depths.items() if 250 <= d < 1000) >= 20
    assert sum(n for d, n in depths.items() if d >= 1000) >= 20
    assert max(depths) >= 100_000  # an unclosed flood of brackets


def test_embeddings_requests_are_heavy_with_copies(requests: list[RawRequest]) -> None:
    bound = Settings().cache.embeddings_max_copies
    most: list[int] = []
    for r in requests:
        if r.path != "/v1/embeddings":
            continue
        try:
            inputs = parse_json(r.body)["input"]
        except (ValueError, KeyError, TypeError):  # TooDeep is a ValueError
            continue
        if isinstance(inputs, list) and inputs and all(isinstance(i, str) for i in inputs):
            most.append(max(Counter(inputs).values()))
    assert bound in most  # at the bound: accepted
    assert sum(1 for m in most if bound < m <= 2 * bound) >= 5  # just past it
    assert sum(1 for m in most if m >= 2048) >= 5  # the bound of inputs, all one text


def test_multipart_uploads_are_hostile(requests: list[RawRequest]) -> None:
    uploads = [r for r in requests if r.path == "/v1/files" and r.method == "POST"]
    close = f"--{fuzz_shapes.BOUNDARY}--".encode()
    assert sum(1 for r in uploads if close not in r.body) >= 50  # no close delimiter
    assert sum(1 for r in uploads if close in r.body) >= 50
    assert sum(1 for r in uploads if len(r.body) > fuzz_shapes.UPLOAD_BYTES) >= 20  # huge parts
    stalled = [r for r in uploads if r.stall_at is not None]
    assert stalled, "no upload stalls mid-body"


def test_requests_stall_mid_body_and_mid_head(requests: list[RawRequest]) -> None:
    stalled = [r for r in requests if r.stall_at is not None]
    assert len(stalled) >= 20
    heads = [
        r for r in stalled if r.stall_at is not None and r.stall_at < len(r.encode()) - len(r.body)
    ]
    assert heads
    assert len(heads) < len(stalled)
    for r in stalled:
        whole = r.encode()
        assert r.stall_at is not None
        assert whole.index(b"\r\n") < r.stall_at < len(whole)
