"""Routing rules: every `when` field tested alone and together; first match wins; the
request's `metadata` bounded as OpenAI bounds it."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from levergate.config import RuleSettings, WhenSettings
from levergate.errors import BadRequest
from levergate.policies import routing as rules
from levergate.policies.routing import Facts


def rule(name: str, to: str, **when: Any) -> RuleSettings:
    return RuleSettings(name=name, to=to, when=WhenSettings(**when))


def test_each_condition_decides_alone() -> None:
    facts = Facts(feature="support", tenant="acme", metadata={"tier": "free"}, prompt_tokens=500,
                  tools=True, images=False, response_format=True)  # fmt: skip
    holds = [
        WhenSettings(feature=["support", "faq"]),
        WhenSettings(tenant=["acme"]),
        WhenSettings(metadata={"tier": "free"}),
        WhenSettings(min_prompt_tokens=500),
        WhenSettings(max_prompt_tokens=500),
        WhenSettings(tools=True),
        WhenSettings(images=False),
        WhenSettings(response_format=True),
    ]
    fails = [
        WhenSettings(feature=["faq"]),
        WhenSettings(tenant=["other"]),
        WhenSettings(metadata={"tier": "paid"}),
        WhenSettings(metadata={"missing": "x"}),
        WhenSettings(min_prompt_tokens=501),
        WhenSettings(max_prompt_tokens=499),
        WhenSettings(tools=False),
        WhenSettings(images=True),
        WhenSettings(response_format=False),
    ]
    assert all(rules.matches(w, facts) for w in holds)
    assert not any(rules.matches(w, facts) for w in fails)
    assert rules.matches(
        WhenSettings(feature=["support"], tools=True, max_prompt_tokens=600), facts
    )
    assert not rules.matches(WhenSettings(feature=["support"], tools=False), facts)


def test_first_match_wins_in_config_order() -> None:
    ordered = [rule("a", "strong", min_prompt_tokens=1000), rule("b", "cheap", tenant=["acme"]),
               rule("c", "strong", tenant=["acme"])]  # fmt: skip
    assert rules.first_match(ordered, Facts(tenant="acme", prompt_tokens=10)) == ordered[1]
    assert rules.first_match(ordered, Facts(tenant="acme", prompt_tokens=5000)) == ordered[0]
    assert rules.first_match(ordered, Facts(tenant="zeta", prompt_tokens=10)) is None
    assert rules.counts_tokens(ordered)
    assert not rules.counts_tokens(ordered[1:])


@given(st.builds(Facts, feature=st.text(max_size=8), tenant=st.text(max_size=8),
                 prompt_tokens=st.none() | st.integers(0, 10**6), tools=st.booleans(),
                 images=st.booleans(), response_format=st.booleans()))  # fmt: skip
def test_an_empty_when_matches_everything(facts: Facts) -> None:
    assert rules.matches(WhenSettings(), facts)


def test_request_shapes_are_read() -> None:
    body: dict[str, Any] = {
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "what is"},
                                         {"type": "image_url", "image_url": {"url": "x"}}]},
            {"role": "assistant", "content": "a cat"},
            {"role": "user", "content": "and this?"},
        ],
        "tools": [{"type": "function", "function": {"name": "f"}}],
        "response_format": {"type": "json_schema", "json_schema": {}},
    }  # fmt: skip
    assert rules.has_images(body)
    assert rules.has_tools(body)
    assert rules.wants_json(body)
    assert rules.texts(body) == ["be brief", "what is", "a cat", "and this?"]
    assert rules.last_user_text(body) == "and this?"
    plain = {"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "text"}}
    assert not rules.has_images(plain)
    assert not rules.has_tools(plain)
    assert not rules.wants_json(plain)
    assert rules.last_user_text({"prompt": "complete me"}) == "complete me"
    assert rules.texts({"prompt": ["a", 3, "b"]}) == ["a", "b"]
    assert rules.last_user_text({"messages": "junk"}) == ""


@pytest.mark.parametrize(
    "metadata",
    [["a"], "tier=free", {f"k{i}": "v" for i in range(17)}, {"k": 3}, {"k": "v" * 513},
     {"k" * 65: "v"}],
)  # fmt: skip
def test_bad_metadata_is_a_400(metadata: Any) -> None:
    with pytest.raises(BadRequest) as raised:
        rules.metadata_of({"metadata": metadata})
    assert raised.value.param == "metadata"


def test_metadata_within_bounds_is_read() -> None:
    assert rules.metadata_of({}) == {}
    assert rules.metadata_of({"metadata": {"tier": "free"}}) == {"tier": "free"}
