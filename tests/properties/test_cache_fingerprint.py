"""Properties of the exact-cache key: every output-shaping change misses, nothing else does."""

from __future__ import annotations

import random
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from levergate.core.call import Call, Context
from levergate.policies.fingerprint import (
    _EMPTY_IS_ABSENT,
    NON_SHAPING,
    ORDERED,
    _canonical_message,
    canonical_body_bytes,
    canonical_bytes,
    fingerprint,
    head_bytes,
    key_of,
)

TEXT = st.text(min_size=1, max_size=20)
MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "user", "assistant"]), "content": TEXT}
)
BODY = st.fixed_dictionaries(
    {"model": st.just("m"), "messages": st.lists(MESSAGE, min_size=1, max_size=4)},
    optional={
        "temperature": st.sampled_from([0, 0.5, 1.0]),
        "max_tokens": st.integers(1, 500),
        "seed": st.integers(0, 10),
        "top_p": st.sampled_from([0.1, 0.9]),
    },
)
# One change per output-shaping field the issue names, plus provider extras.
SHAPING_CHANGES: dict[str, Any] = {
    "temperature": 0.25,
    "top_p": 0.33,
    "seed": 12345,
    "max_tokens": 777,
    "max_completion_tokens": 778,
    "stop": ["END"],
    "n": 3,
    "logit_bias": {"50256": -100},
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
    "tool_choice": "required",
    "parallel_tool_calls": False,
    "response_format": {"type": "json_object"},
    "presence_penalty": 0.5,
    "frequency_penalty": 0.5,
    "logprobs": True,
    "top_logprobs": 3,
    "reasoning_effort": "high",
    "top_k": 40,  # a provider-specific extra (vLLM, llama.cpp)
    "repetition_penalty": 1.1,
}


def key(
    body: dict[str, Any],
    *,
    kind: str = "chat",
    resolved_model: str = "m->up/m",
    namespace: str = "t",
) -> str:
    return fingerprint(body, kind=kind, resolved_model=resolved_model, namespace=namespace)


@given(BODY)
def test_every_output_shaping_field_changes_the_key(body: dict[str, Any]) -> None:
    base = key(body)
    for name, value in SHAPING_CHANGES.items():
        if body.get(name) == value:
            continue
        assert key({**body, name: value}) != base, name


@given(BODY, TEXT)
def test_message_text_role_and_order_change_the_key(body: dict[str, Any], text: str) -> None:
    base = key(body)
    messages = body["messages"]
    last = messages[-1]
    if last["content"] != text:
        assert key({**body, "messages": [*messages[:-1], {**last, "content": text}]}) != base
    role = "assistant" if last["role"] != "assistant" else "user"
    assert key({**body, "messages": [*messages[:-1], {**last, "role": role}]}) != base
    if len(messages) > 1 and messages[0] != messages[-1]:
        assert key({**body, "messages": list(reversed(messages))}) != base


@given(BODY)
def test_model_kind_and_tenant_namespace_change_the_key(body: dict[str, Any]) -> None:
    base = key(body)
    assert key(body, resolved_model="m->other/m") != base
    assert key(body, namespace="other-tenant") != base
    assert key(body, kind="completion") != base


@given(BODY)
def test_the_key_of_the_body_bytes_alone_is_the_fingerprint(body: dict[str, Any]) -> None:
    """What the exact cache keys by (`key_of` of `Call.canonical_bytes`): the same key as the
    whole computation, and the same bytes after the head."""
    data = canonical_body_bytes(body)
    assert key_of(data, kind="chat", resolved_model="gpt", namespace="t1") == key(
        body, resolved_model="gpt", namespace="t1"
    )
    assert canonical_bytes(body, kind="chat", resolved_model="gpt", namespace="t1") == (
        head_bytes("chat", "gpt", "t1") + data
    )


def test_a_call_computes_its_body_bytes_once_for_every_call_sharing_its_body() -> None:
    """Kept on the trace with the body they are of: a call derived with the same body (a new
    context) reads them; one with a changed body computes its own."""
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 0}
    call = Call(kind="chat", body=body, ctx=Context(request_id="r"))
    call.ctx.trace.canonical = (body, b"planted")  # what an earlier computation left
    assert call.with_controls(feature="f").canonical_bytes() == b"planted"
    changed = call.with_body(temperature=1)
    assert changed.canonical_bytes() == canonical_body_bytes(changed.body)
    assert call.ctx.trace.canonical == (changed.body, canonical_body_bytes(changed.body))
    assert Call(kind="chat", body=dict(body), ctx=call.ctx).canonical_bytes() == (
        canonical_body_bytes(body)  # an equal body, not the same object: computed
    )


@given(BODY, st.randoms(use_true_random=False))
def test_non_shaping_fields_and_key_order_do_not_change_the_key(
    body: dict[str, Any], rng: random.Random
) -> None:
    base = key(body)
    noisy = {
        **body,
        "stream": True,
        "stream_options": {"include_usage": True},
        "user": "someone",
        "metadata": {"feature": "x"},
        "store": True,
        "service_tier": "auto",
        "prompt_cache_key": "tenant-7",
    }
    assert set(noisy) - set(body) <= NON_SHAPING
    assert key(noisy) == base
    items = list(body.items())
    rng.shuffle(items)
    shuffled = dict(items)
    shuffled["messages"] = [dict(reversed(list(m.items()))) for m in body["messages"]]
    assert key(shuffled) == base


@given(BODY)
def test_equivalent_spellings_share_a_key(body: dict[str, Any]) -> None:
    base = key(body)
    assert key({**body, "n": 1, "tools": [], "logit_bias": {}, "user": None}) == base
    assert key({**body, "stop": "END"}) == key({**body, "stop": ["END"]})
    parts = [{**m, "content": [{"type": "text", "text": m["content"]}]} for m in body["messages"]]
    assert key({**body, "messages": parts}) == base


def test_schema_property_order_is_kept() -> None:
    schema_ab = {"type": "object", "properties": {"a": {}, "b": {}}}
    schema_ba = {"type": "object", "properties": {"b": {}, "a": {}}}
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}]}

    def with_schema(schema: dict[str, Any]) -> dict[str, Any]:
        fmt = {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}
        return {**body, "response_format": fmt}

    assert key(with_schema(schema_ab)) != key(with_schema(schema_ba))


def test_the_key_of_a_known_body_stays_what_stored_entries_were_written_under() -> None:
    """Entries already in a shared cache were stored under these keys (SHA-256 of the canonical
    bytes, computed incrementally before `canonical_bytes` existed)."""
    tool = {"type": "function", "function": {"name": "f", "parameters": {"b": 1, "a": 2}}}
    text = [{"type": "text", "text": "hi"}]
    body = {"model": "m", "messages": [{"role": "user", "content": text}], "stop": "x",
            "temperature": 0, "stream": True, "tools": [tool]}  # fmt: skip
    assert fingerprint(body, kind="chat", resolved_model="gpt", namespace="t1") == (
        "80f68e05b80ba9ec8f5521821126095d5d7c901b20343f64a48b6580085dc88b"
    )
    assert fingerprint(body, kind="chat", resolved_model="gpt", namespace="",
                       exclude=frozenset({"messages"})) == (
        "9f9249d170793ccfb9ea1b44971a8b56dfc79d85f410ddd031ccc4aa3708482f"
    )  # fmt: skip


def _reference_body(body: dict[str, Any]) -> dict[str, Any]:
    """The canonical body as `canonical_body` (policies/fingerprint.py) wrote it before its loop
    was fused into `canonical_body_bytes` (2026-12-04): the output-shaping part of a body, with
    equivalent spellings merged."""
    special = _EMPTY_IS_ABSENT | {"n", "messages"}
    out: dict[str, Any] = {}
    for name, value in body.items():
        if value is None or name in NON_SHAPING:
            continue
        if name not in special:
            out[name] = value
        elif name == "messages" and isinstance(value, list):
            out[name] = [_canonical_message(m) for m in value]
        elif (name in _EMPTY_IS_ABSENT and not value) or (
            name == "n" and value == 1 and not isinstance(value, bool)
        ):
            continue
        elif name == "stop" and isinstance(value, str):
            out[name] = [value]
        else:
            out[name] = value
    return out


def _reference_body_bytes(body: dict[str, Any], exclude: frozenset[str] = frozenset()) -> bytes:
    """`canonical_body_bytes` as it was written before its loop was fused (2026-12-04): the
    canonical body, its ordered fields popped in `ORDERED`'s order, `exclude` dropped from the
    rest, the rest sorted."""
    canonical = _reference_body(body)
    ordered = [(name, canonical.pop(name)) for name in ORDERED if name in canonical]
    for name in exclude:
        canonical.pop(name, None)
    parts = [orjson.dumps(canonical, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)]
    for name, value in ordered:
        parts += (b"\x00" + name.encode() + b"\x00",
                  orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS))  # fmt: skip
    return b"".join(parts)


TOOL = {"type": "function", "function": {"name": "f", "parameters": {"b": 1}}}
ORDERED_VALUES = st.sampled_from([None, [], {}, [TOOL], {"type": "json_schema", "s": {"b": 1}}])


# Fields the canonical body spells anew, besides the ordered ones, and a message of text parts.
OTHER_VALUES = {
    "stop": st.sampled_from(["x", ["x"], [], None]),
    "n": st.sampled_from([1, 2, True, None]),
    "user": st.just("u"),
    "logit_bias": st.sampled_from([{}, {"1": 2}]),
    "messages": st.just([{"role": "user", "content": [{"type": "text", "text": "hi"}]}, "odd"]),
}


@given(BODY, st.fixed_dictionaries({}, optional={**dict.fromkeys(ORDERED, ORDERED_VALUES),
                                                 **OTHER_VALUES}),
       st.sets(st.sampled_from(["messages", "temperature", "tools", "stop", "seed"])),
       st.randoms(use_true_random=False))  # fmt: skip
def test_the_fused_body_bytes_are_the_reference_ones(
    body: dict[str, Any], extra: dict[str, Any], exclude: set[str], rng: random.Random
) -> None:
    """The fused loop (fewer instructions) writes the bytes the reference composition does, for
    any body, ordered and respelled fields in any order, and any `exclude`."""
    items = [*{**body, **extra}.items()]
    rng.shuffle(items)
    mixed = dict(items)
    for excluded in (frozenset(), frozenset(exclude)):
        assert canonical_body_bytes(mixed, exclude=excluded) == _reference_body_bytes(
            mixed, excluded
        )


class _Key(str):
    """A key that is text but not `str` itself (orjson sorts it only with OPT_NON_STR_KEYS)."""

    __slots__ = ()


@given(BODY, st.sampled_from([{1: "a"}, {_Key("k"): 1}, {"k": {2: [1], "1": 0}}, {"k": {}}]))
def test_keys_that_are_not_text_are_written_as_before(
    body: dict[str, Any], extra: dict[Any, Any]
) -> None:
    """Keys are sorted without `OPT_NON_STR_KEYS` first (a parsed body's are text): a body
    with other keys, anywhere, is written with the option, as it always was; a value that is
    not JSON still raises TypeError."""
    mixed = {**body, "extra": extra}
    assert canonical_body_bytes(mixed) == _reference_body_bytes(mixed)
    with pytest.raises(TypeError):
        canonical_body_bytes({**body, "extra": object()})
