from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from levergate.config import RequestLimitsSettings
from levergate.core.call import Kind
from levergate.errors import BadRequest
from levergate.protocol.openai.body import (
    check_body,
    has_generated_token,
    is_usage_only,
)

MESSAGES = [{"role": "user", "content": "hi"}]
CHAT = {"model": "m", "messages": MESSAGES}
LIMITS = RequestLimitsSettings()


def test_a_valid_chat_body_passes_unchanged() -> None:
    assert check_body("chat", dict(CHAT), limits=LIMITS) == CHAT


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": MESSAGES}, "model"),
        ({"model": "m"}, "messages"),
        ({**CHAT, "model": 3}, "model"),
        ({**CHAT, "messages": "hi"}, "messages"),
        ({**CHAT, "messages": []}, "messages"),
        ({**CHAT, "messages": ["hi"]}, "messages[0]"),
        ({**CHAT, "stream": "yes"}, "stream"),
        ({**CHAT, "max_tokens": 1.5}, "max_tokens"),
        ({**CHAT, "max_tokens": True}, "max_tokens"),
        ({**CHAT, "temperature": "hot"}, "temperature"),
        ({**CHAT, "stream_options": []}, "stream_options"),
    ],
)
def test_each_bad_field_is_named(body: dict[str, object], param: str) -> None:
    with pytest.raises(BadRequest) as caught:
        check_body("chat", body, limits=LIMITS)
    assert caught.value.param == param
    assert caught.value.http_status == 400


def test_non_objects_are_refused() -> None:
    bodies: tuple[object, ...] = ([], "x", 3, None)
    for body in bodies:
        with pytest.raises(BadRequest):
            check_body("chat", body, limits=LIMITS)


@pytest.mark.parametrize(
    ("kind", "body"),
    [
        ("embedding", {"model": "e", "input": None}),
        ("chat", {"model": "m", "messages": None}),
        ("completion", {"model": "m", "prompt": None}),
        ("chat", {"model": None, "messages": [{"role": "user", "content": "hi"}]}),
    ],
)
def test_a_required_field_sent_as_null_is_missing(kind: Kind, body: dict[str, object]) -> None:
    """Found by the fuzz: `"input": null` reached the count check and answered 500."""
    with pytest.raises(BadRequest, match="Missing required parameter"):
        check_body(kind, body, limits=LIMITS)


def test_embeddings_and_completions_have_their_own_required_fields() -> None:
    check_body("embedding", {"model": "e", "input": ["a", "b"]}, limits=LIMITS)
    check_body("completion", {"model": "m", "prompt": "once"}, limits=LIMITS)
    with pytest.raises(BadRequest):
        check_body("embedding", {"model": "e"}, limits=LIMITS)
    with pytest.raises(BadRequest):
        check_body("completion", {"model": "m", "prompt": 5}, limits=LIMITS)


@pytest.mark.parametrize(
    ("kind", "body", "param"),
    [
        ("embedding", {"model": "e", "input": ["a"] * 2049}, "input"),
        ("embedding", {"model": "e", "input": "a", "dimensions": 0}, "dimensions"),
        ("embedding", {"model": "e", "input": "a", "dimensions": 10**6}, "dimensions"),
        ("chat", {**CHAT, "messages": MESSAGES * 2049}, "messages"),
        ("chat", {**CHAT, "tools": [{"type": "function"}] * 129}, "tools"),
        ("chat", {**CHAT, "stop": ["a"] * 5}, "stop"),
        ("chat", {**CHAT, "stop": [1]}, "stop"),
        ("chat", {**CHAT, "n": 0}, "n"),
        ("chat", {**CHAT, "n": 129}, "n"),
        ("chat", {**CHAT, "max_tokens": -5}, "max_tokens"),
        ("chat", {**CHAT, "max_tokens": 0}, "max_tokens"),
        ("chat", {**CHAT, "max_completion_tokens": 10**7}, "max_completion_tokens"),
        ("completion", {"model": "m", "prompt": "p", "max_tokens": -1}, "max_tokens"),
    ],
)
def test_client_controlled_counts_are_bounded(
    kind: Kind, body: dict[str, object], param: str
) -> None:
    """Each count a client sets is bounded before any layer does work in proportion to it
    (OpenAI's own bounds): 20,000 copies of one embedding input made a 651 MB response."""
    with pytest.raises(BadRequest) as caught:
        check_body(kind, body, limits=LIMITS)
    assert caught.value.param == param
    assert caught.value.http_status == 400


def test_counts_at_their_bounds_pass() -> None:
    check_body("embedding", {"model": "e", "input": ["a"] * 2048}, limits=LIMITS)
    check_body("embedding", {"model": "e", "input": list(range(5000))}, limits=LIMITS)  # tokens
    check_body("chat", {**CHAT, "stop": ["a"] * 4, "n": 128, "max_tokens": 1}, limits=LIMITS)
    check_body("completion", {"model": "m", "prompt": "p", "max_tokens": 0}, limits=LIMITS)
    small = RequestLimitsSettings(max_embedding_inputs=2)
    with pytest.raises(BadRequest):
        check_body("embedding", {"model": "e", "input": ["a", "b", "c"]}, limits=small)


BOUNDED = ("n", "max_tokens", "max_completion_tokens", "max_output_tokens")


@given(
    st.sampled_from(["chat", "completion"]),
    st.dictionaries(st.sampled_from(BOUNDED), st.integers(-3, 200_000)),
)
def test_each_bounded_count_is_held_to_its_range_and_the_first_one_out_is_named(
    kind: Kind, fields: dict[str, int]
) -> None:
    """Any of the ranged fields, any values: refused exactly when one is out of its range,
    naming the first out in the order n, max_tokens, max_completion_tokens, max_output_tokens
    (the checks look only at the fields a body has)."""
    lowest = 1 if kind == "chat" else 0
    most = LIMITS.max_output_tokens
    ranges = {"n": (1, LIMITS.max_n), "max_tokens": (lowest, most),
              "max_completion_tokens": (lowest, most), "max_output_tokens": (16, most)}  # fmt: skip
    base = CHAT if kind == "chat" else {"model": "m", "prompt": "p"}
    out = [p for p in BOUNDED if p in fields and not ranges[p][0] <= fields[p] <= ranges[p][1]]
    if not out:
        check_body(kind, {**base, **fields}, limits=LIMITS)
        return
    with pytest.raises(BadRequest) as caught:
        check_body(kind, {**base, **fields}, limits=LIMITS)
    assert caught.value.param == out[0]
    assert caught.value.code == "integer_out_of_range"


def test_floats_and_ints_are_both_numbers_but_null_is_allowed() -> None:
    check_body("chat", {**CHAT, "temperature": 0, "top_p": 0.5, "max_tokens": None}, limits=LIMITS)


def test_the_first_generated_token_is_not_the_role_preamble() -> None:
    preamble = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
    token = {"choices": [{"index": 0, "delta": {"content": "Hi"}}]}
    tool = {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0}]}}]}
    text = {"choices": [{"index": 0, "text": "Hi"}]}
    assert not has_generated_token(preamble)
    assert all(has_generated_token(c) for c in (token, tool, text))
    assert not has_generated_token({"choices": [], "usage": {"prompt_tokens": 1}})


def test_the_usage_chunk_is_recognised() -> None:
    assert is_usage_only({"choices": [], "usage": {"prompt_tokens": 1}})
    assert not is_usage_only({"choices": [{"delta": {}}], "usage": None})


@pytest.mark.parametrize("tier", ["standard", "on_demand", "turbo", "", "FLEX", 3, ["flex"]])
def test_an_unknown_service_tier_is_a_400_naming_the_allowed_values(tier: object) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "service_tier": tier}
    with pytest.raises(BadRequest) as caught:
        check_body("chat", body, limits=RequestLimitsSettings())
    assert caught.value.param == "service_tier"
    assert "'auto', 'default', 'flex', 'priority', 'fast', 'scale'" in caught.value.message


def test_the_known_service_tiers_pass() -> None:
    for tier in ("auto", "default", "flex", "priority", "fast", "scale", None):
        body = {"model": "m", "prompt": "x", "service_tier": tier}
        assert check_body("completion", body, limits=RequestLimitsSettings()) is body
