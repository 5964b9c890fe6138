"""`CheckedBodies`: a body's check remembered by its raw bytes and kind (issue 22, a cache hit's
work) must give the verdict a fresh `check_body` gives, every time, in any order."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from levergate.config import RequestLimitsSettings
from levergate.core.call import Kind
from levergate.core.json_bound import parse_json
from levergate.errors import BadRequest
from levergate.protocol.openai.body import (
    CHECKED_BODIES,
    CHECKED_BODY_BYTES,
    CHECKED_BYTES,
    CheckedBodies,
    check_body,
)

LIMITS = RequestLimitsSettings(max_n=3, max_messages=4, max_stop=2, max_tools=2,
                               max_output_tokens=100, max_embedding_inputs=3)  # fmt: skip
KINDS: tuple[Kind, ...] = ("chat", "completion", "embedding", "response")
CHAT = b'{"model":"m","messages":[{"role":"user","content":"hi"}]}'

_scalars = st.none() | st.booleans() | st.integers(-3, 200) | st.floats(-2, 2) | st.text(max_size=3)
_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.dictionaries(st.sampled_from(["role", "x"]), inner, max_size=2)
    ),
    max_leaves=8,
)
_messages = st.lists(
    st.fixed_dictionaries({"role": st.sampled_from(["user", "system"]) | _scalars,
                           "content": st.text(max_size=3)}) | _scalars,
    max_size=6,
)  # fmt: skip
_FIELDS = ["model", "messages", "prompt", "input", "stream", "max_tokens", "n", "stop", "tools",
           "temperature", "metadata", "service_tier", "dimensions",
           "max_output_tokens"]  # fmt: skip
_bodies = (
    st.dictionaries(
        st.sampled_from(_FIELDS),
        _values | _messages | st.sampled_from(["m", "flex", "turbo", 0, 4, 101]),
        max_size=7,
    )
    | _values
)


def _verdict(kind: Kind, body: Any, check: Any) -> tuple[str, str | None] | None:
    """None for a pass, else the 400's message and parameter."""
    try:
        check(kind, body)
    except BadRequest as exc:
        return exc.message, exc.param
    return None


@settings(max_examples=300, deadline=None)
@given(
    bodies=st.lists(_bodies, min_size=1, max_size=4),
    asks=st.lists(st.tuples(st.sampled_from(KINDS), st.integers(0, 3)), min_size=1, max_size=25),
)
def test_a_remembered_check_gives_the_verdict_a_fresh_check_gives(
    bodies: list[Any], asks: list[tuple[Kind, int]]
) -> None:
    """The gateway's way (`Gateway.make_call`): look the raw bytes up, check on a miss."""
    checked = CheckedBodies(LIMITS)
    raws = [orjson.dumps(body) for body in bodies]

    def memoised(kind: Kind, raw: bytes) -> None:
        body = parse_json(raw)  # each request parses its own body afresh
        if checked.get(raw) != kind:
            checked.check(kind, body, raw)

    for kind, at in asks:
        raw = raws[at % len(raws)]
        fresh = _verdict(kind, parse_json(raw), lambda k, b: check_body(k, b, limits=LIMITS))
        assert _verdict(kind, raw, memoised) == fresh
        # Remembered once passed, as the kind it passed as; a refusal remembers nothing.
        if fresh is None:
            assert checked.get(raw) == kind
        else:
            assert checked.get(raw) != kind


def test_a_refused_body_is_not_remembered_and_is_refused_again() -> None:
    checked = CheckedBodies(LIMITS)
    raw = b'{"model":"m","messages":[{"role":"user","content":"hi"}],"n":4}'
    for _ in range(2):
        with pytest.raises(BadRequest) as caught:
            checked.check("chat", parse_json(raw), raw)
        assert caught.value.param == "n"
        assert checked.get(raw) is None


def test_bytes_that_passed_as_one_kind_are_checked_again_as_another() -> None:
    checked = CheckedBodies(LIMITS)
    checked.check("chat", parse_json(CHAT), CHAT)
    assert checked.get(CHAT) == "chat"
    assert checked.get(CHAT) != "completion"  # so the gateway checks it as a completion:
    with pytest.raises(BadRequest, match="prompt"):
        checked.check("completion", parse_json(CHAT), CHAT)
    assert checked.get(CHAT) == "chat"


def test_other_limits_decide_afresh() -> None:
    """A reload builds a new gateway, with a memo of its own limits."""
    raw = b'{"model":"m","messages":[{"role":"user","content":"hi"}],"n":3}'
    CheckedBodies(LIMITS).check("chat", parse_json(raw), raw)
    with pytest.raises(BadRequest):
        CheckedBodies(RequestLimitsSettings(max_n=2)).check("chat", parse_json(raw), raw)


def test_the_memo_is_bounded_by_count_and_bytes_and_keeps_no_large_body() -> None:
    checked = CheckedBodies(LIMITS)
    large = b'{"model":"m","prompt":"%s"}' % (b"x" * CHECKED_BODY_BYTES)
    checked.check("completion", parse_json(large), large)
    assert checked.get(large) is None
    assert len(checked) == 0
    for i in range(CHECKED_BODIES + 10):
        raw = b'{"model":"m","prompt":"%d"}' % i
        checked.check("completion", parse_json(raw), raw)
        assert 1 <= len(checked) <= CHECKED_BODIES
        assert checked.get(raw) == "completion"  # the newest is always kept
    big = b'{"model":"m","prompt":"%s"}' % (b"y" * (CHECKED_BODY_BYTES - 40))
    held = 0
    for i in range(2 * CHECKED_BYTES // len(big) + 2):
        raw = big + b" " * (i % 7) + b"\n" * (i // 7)  # distinct bytes, the same body
        checked.check("completion", parse_json(raw), raw)
        held = sum(len(k) for k in checked._kinds)
        assert held <= CHECKED_BYTES
    assert held > 0


def test_without_raw_bytes_nothing_is_remembered() -> None:
    checked = CheckedBodies(LIMITS)
    assert checked.check("chat", parse_json(CHAT), None) == parse_json(CHAT)
    assert len(checked) == 0
