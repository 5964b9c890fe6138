"""The one nesting bound at parse time (core/json_bound.py): the check agrees with the parsed
structure on any JSON, whatever its strings hold (brackets, quotes, backslash runs) and
however it is spelled, and the bound sits below what the serializer on the way out accepts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import levergate
from levergate.config import MAX_JSON_DEPTH
from levergate.core.json_bound import WRITE_DEPTH, TooDeep, parse_json, too_deep

# Strings full of what could fool a scanner: brackets, quotes, backslash runs, unicode.
TEXT = st.text(alphabet=st.sampled_from('[]{}"\\\\\\ab:,\n\t\u00e9\U0001f600'), max_size=12)
SCALARS = st.none() | st.booleans() | st.integers(min_value=-(2**63), max_value=2**63 - 1) | TEXT
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=40,
)


def depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max(map(depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(depth, value), default=0)
    return 0


def nested(levels: int, *, text: str = "x") -> bytes:  # `levels` arrays around a string
    return b"[" * levels + orjson.dumps(text) + b"]" * levels


@settings(max_examples=300)
@given(VALUES, st.integers(min_value=1, max_value=12))
def test_the_check_agrees_with_the_structure_in_every_spelling(value: Any, limit: int) -> None:
    spellings = (
        orjson.dumps(value),
        json.dumps(value).encode(),
        json.dumps(value, ensure_ascii=False, indent=2).encode(),
    )
    assert too_deep(value, limit=limit) == (depth(value) > limit)
    for text in spellings:
        assert too_deep(value, limit=limit, text=text) == (depth(value) > limit)
        assert too_deep(value, limit=limit, text=text.decode()) == (depth(value) > limit)


@given(st.integers(min_value=1, max_value=300), st.integers(min_value=1, max_value=WRITE_DEPTH - 1))
def test_deep_values_past_the_counting_are_judged_exactly(levels: int, limit: int) -> None:
    text = nested(levels) + b" " * 5000  # too long to be cleared by counting
    assert too_deep(orjson.loads(text), limit=limit, text=text) == (levels > limit)


def test_orjson_writes_exactly_write_depth_levels() -> None:
    # The check rests on it: a new orjson that writes more (or fewer) levels fails here.
    orjson.dumps(orjson.loads(b"[" * WRITE_DEPTH + b"]" * WRITE_DEPTH))
    with pytest.raises(orjson.JSONEncodeError, match="Recursion limit"):
        orjson.dumps(orjson.loads(b"[" * (WRITE_DEPTH + 1) + b"]" * (WRITE_DEPTH + 1)))


def test_brackets_inside_strings_never_count() -> None:
    text = orjson.dumps({"a": "[" * 1000 + '\\"{' * 500, "b": ["\\" * 7, '"]]]']})
    assert not too_deep(orjson.loads(text), limit=2, text=text)
    assert parse_json(text)["b"][0] == "\\" * 7


def test_the_bound_parses_and_one_more_level_is_too_deep() -> None:
    assert parse_json(nested(MAX_JSON_DEPTH)) is not None
    with pytest.raises(TooDeep) as raised:
        parse_json(nested(MAX_JSON_DEPTH + 1))
    assert raised.value.limit == MAX_JSON_DEPTH
    # A JSONDecodeError: every caller that refuses malformed JSON refuses this too.
    assert isinstance(raised.value, orjson.JSONDecodeError)
    assert f"deeper than {MAX_JSON_DEPTH} levels" in raised.value.msg


def test_what_parses_can_be_written_back_with_room_for_the_gateways_own_wrapping() -> None:
    # orjson writes at most 254 levels: whatever was parsed, wrapped in a few more levels
    # (a batch result line adds three), must still serialize.
    value = parse_json(nested(MAX_JSON_DEPTH))
    wrapped = {"id": "x", "response": {"status_code": 200, "body": {"data": [value]}}}
    assert orjson.loads(orjson.dumps(wrapped))["response"]["body"]["data"][0] == value


def test_malformed_json_is_still_a_decode_error_not_a_depth_one() -> None:
    with pytest.raises(orjson.JSONDecodeError) as raised:
        parse_json(b"[" * 500)
    assert not isinstance(raised.value, TooDeep)


def test_json_enters_the_gateway_only_through_the_bounded_parser() -> None:
    # The bound holds only if nothing parses around it: a new `orjson.loads` in the gateway
    # must be a decision (listed here with its reason), not an accident.
    allowed = {
        "core/json_bound.py",  # the bounded parser itself
        "batch/lines.py",  # validate_line: parses, then refuses the one line with too_deep
    }
    root = Path(levergate.__file__).parent
    found = sorted(
        str(path.relative_to(root))
        for path in root.rglob("*.py")
        if "orjson.loads(" in path.read_text() and "simulator" not in str(path)
    )
    assert set(found) <= allowed, set(found) - allowed


def test_a_checked_value_is_not_kept_alive_by_the_check() -> None:
    # The wrapping lists are reused between checks (core/json_bound.py): their slot is emptied
    # after each, or the last body checked would stay in memory until the next.
    import gc
    import weakref

    class Marker(list[Any]):  # a list orjson writes, that a weak reference can follow
        pass

    marker = Marker([1])
    gone = weakref.ref(marker)
    value = [marker]  # no text given: judged by the wrapping
    assert not too_deep(value, limit=3)
    del value, marker
    gc.collect()
    assert gone() is None
