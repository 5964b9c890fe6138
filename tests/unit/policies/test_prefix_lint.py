"""Finding cache breakers by comparing prompts, and canonical tool order."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from levergate.policies.prefix_lint import (
    canonical_tools,
    classify,
    schema_keys_vary,
    shape,
    tool_order_varies,
    varying_span,
)

SHARED = (
    "You are the support assistant of a bank. Follow the policy below exactly. " * 60
).encode()


def prompt(head: str) -> bytes:
    return b'[{"role":"system","content":"' + head.encode() + b" " + SHARED + b'"}]'


def test_a_timestamp_ahead_of_shared_instructions_is_found_where_it_is() -> None:
    a = prompt("Now: 2026-12-01T10:32:11Z.")
    b = prompt("Now: 2026-12-01T10:47:59Z.")
    span = varying_span(a, b)
    assert span is not None
    assert span.position == a.index(b"3")
    assert span.shared_after >= 2048
    assert span.kind == "varying text" or span.shape.startswith("9")
    assert b"47" not in span.shape.encode()  # the shape hides the digits


def test_a_uuid_and_a_user_name_are_found_too() -> None:
    a = prompt("Request 3f2b1c9e-8a7d-4e6f-9b0a-1c2d3e4f5a6b.")
    b = prompt("Request 9d8c7b6a-5f4e-4d3c-8b2a-0f1e2d3c4b5a.")
    assert varying_span(a, b) is not None
    named = varying_span(prompt("The user is Alice Martin."), prompt("The user is Bob Li."))
    assert named is not None
    assert "Bob" not in named.shape
    assert named.shape.startswith("a")


def test_different_prompts_and_equal_ones_are_not_breakers() -> None:
    assert varying_span(prompt("x"), prompt("x")) is None
    other = b'[{"role":"system","content":"' + b"Completely different. " * 200 + b'"}]'
    assert varying_span(prompt("x"), other) is None
    short = varying_span(b"2026-12-01 hello", b"2026-12-02 hello")  # nothing worth caching after
    assert short is None


def test_classify_and_shape() -> None:
    assert classify("2026-12-01T10:32:11Z") == "timestamp"
    assert classify("2026-12-01") == "date"
    assert classify("3f2b1c9e-8a7d-4e6f-9b0a-1c2d3e4f5a6b") == "uuid"
    assert classify("48213") == "number"
    assert classify("Bob") == "varying text"
    assert shape("José 42 ☃") == "aaaa 99 ?"


def tool(name: str, **params: Any) -> dict[str, Any]:
    schema = {"type": "object", "properties": params, "required": sorted(params)}
    return {"type": "function", "function": {"name": name, "parameters": schema}}


def test_tool_order_and_schema_key_order() -> None:
    a, b = tool("a", x={"type": "string"}), tool("b", y={"type": "integer"})
    assert tool_order_varies([a, b], [b, a])
    assert not tool_order_varies([a, b], [a, b])
    reordered = {"function": a["function"], "type": "function"}
    assert schema_keys_vary([a], [reordered])
    assert not tool_order_varies([a], [reordered])


names = st.text("abcdefgh", min_size=1, max_size=4)
schemas = st.dictionaries(
    names, st.sampled_from([{"type": "string"}, {"type": "integer"}]), max_size=4
)


@given(st.lists(st.tuples(names, schemas), max_size=5), st.randoms())
def test_canonical_tools_mean_the_same_and_serialise_alike(
    specs: list[tuple[str, dict[str, Any]]], rnd: Any
) -> None:
    tools = [tool(n, **p) for n, p in specs]
    shuffled = list(tools)
    rnd.shuffle(shuffled)
    canon = canonical_tools(tools)
    # The same tools (dict equality ignores key order), each property order kept.
    assert sorted(map(repr, map(_normal, canon))) == sorted(map(repr, map(_normal, tools)))
    for c in canon:
        original = next(t for t in tools if t == c)
        assert list(c["function"]["parameters"]["properties"]) == list(
            original["function"]["parameters"]["properties"]
        )
    # Whatever order they came in, the same bytes (names equal: stable by first appearance).
    if len({n for n, _ in specs}) == len(specs):
        assert repr(canonical_tools(shuffled)) == repr(canon)


def _normal(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _normal(value[k]) for k in sorted(value)}
    return [_normal(v) for v in value] if isinstance(value, list) else value
