"""Automatic Anthropic breakpoints on the OpenAI-shaped body: where, with which TTL, and only
when the observed reuse pays."""

from __future__ import annotations

from typing import Any

import pytest

from levergate.config import BreakpointsSettings
from levergate.errors import BadRequest
from levergate.layers.prompt_cache.breakpoints import (
    Boundary,
    Placed,
    Placer,
    _long_lived_first,
    boundaries,
    count_client_breakpoints,
)
from levergate.policies.prompt_cache import Ttl

SYSTEM = "Policy: answer politely and cite the handbook. " * 120  # ~5.6 KB, ~1,400 tokens
DOC = "Handbook chapter text. " * 300  # ~6.9 KB


def body(*turns: str, system: str = SYSTEM, tools: bool = False) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
    for i, text in enumerate(turns):
        messages.append({"role": "user" if i % 2 == 0 else "assistant", "content": text})
    out: dict[str, Any] = {"model": "claude", "messages": messages}
    if tools:
        out["tools"] = [{"type": "function", "function": {"name": "f", "description": "x" * 5000}}]
    return out


def controls(b: dict[str, Any]) -> list[tuple[str, Any]]:
    """(where, cache_control) of every breakpoint in a body."""
    found = [("tools", t["cache_control"]) for t in b.get("tools", []) if "cache_control" in t]
    for m in b["messages"]:
        if isinstance(m["content"], list):
            found += [(m["role"], p["cache_control"]) for p in m["content"] if "cache_control" in p]
    return found


def test_boundaries_in_prompt_order() -> None:
    b = body("Question?", tools=True)
    assert [x.kind for x in boundaries(b, document_tokens=1024)] == ["tools", "system", "history"]
    tokens = [x.tokens for x in boundaries(b, document_tokens=1024)]
    assert tokens == sorted(tokens)


def test_nothing_is_placed_without_evidence_of_reuse() -> None:
    placer = Placer(BreakpointsSettings())
    changes, placed = placer.place(body("Hi"), now=0.0)
    assert changes == {}
    assert placed == []


def test_a_reused_system_prompt_gets_a_5_minute_breakpoint() -> None:
    placer = Placer(BreakpointsSettings())
    placer.place(body("first user"), now=0.0)
    changes, placed = placer.place(body("second user"), now=30.0)  # same system, 30 s later
    assert [(p.boundary.kind, p.ttl) for p in placed] == [("system", "5m")]
    out = {**body("second user"), **changes}
    assert controls(out) == [("system", {"type": "ephemeral"})]
    assert out["messages"][0]["content"][0]["text"] == SYSTEM  # the text itself is unchanged


def test_reuse_only_every_20_minutes_pays_for_a_1_hour_entry() -> None:
    placer = Placer(BreakpointsSettings())
    for i in range(5):
        _, placed = placer.place(body(f"user {i}"), now=i * 1200.0)
    assert [(p.boundary.kind, p.ttl) for p in placed] == [("system", "1h")]


def test_a_short_prefix_never_gets_one() -> None:
    placer = Placer(BreakpointsSettings())
    for i in range(5):
        _, placed = placer.place(body(f"user {i}", system="Be brief."), now=float(i))
    assert placed == []


def test_a_conversation_continued_within_minutes_gets_a_history_breakpoint() -> None:
    placer = Placer(BreakpointsSettings())
    turns = ["Question one? " * 50]
    for i in range(6):  # each turn continues the previous prompt 20 s later
        changes, placed = placer.place(body(*turns), now=i * 20.0)
        turns += [f"Answer {i}. " * 40, f"Follow-up {i}? " * 10]
    assert ("history", "5m") in [(p.boundary.kind, p.ttl) for p in placed]
    out = {**body(*turns[:-2]), **changes}
    assert controls(out)[-1][0] == "user"  # on the last message


def test_client_breakpoints_are_kept_counted_and_bounded() -> None:
    marked = body("Hi")
    marked["messages"][1]["content"] = [
        {"type": "text", "text": "Hi", "cache_control": {"type": "ephemeral"}}
    ]
    assert count_client_breakpoints(marked) == 1
    too_many = body("Hi")
    too_many["messages"][1]["content"] = [
        {"type": "text", "text": str(i), "cache_control": {"type": "ephemeral"}} for i in range(5)
    ]
    with pytest.raises(BadRequest) as caught:
        Placer(BreakpointsSettings()).place(too_many, now=0.0)
    assert caught.value.code == "too_many_cache_breakpoints"


def test_one_hour_entries_come_before_five_minute_ones() -> None:
    b = [
        Boundary(k, 0, -1, t, 0) for k, t in (("tools", 1100), ("system", 1500), ("history", 3000))
    ]
    placed = [
        Placed(b[0], Ttl.FIVE_MINUTES),
        Placed(b[1], Ttl.ONE_HOUR),
        Placed(b[2], Ttl.ONE_HOUR),
    ]
    assert [p.ttl for p in _long_lived_first(placed)] == ["5m", "5m", "5m"]
    placed = [Placed(b[0], Ttl.ONE_HOUR), Placed(b[1], Ttl.FIVE_MINUTES)]
    assert [p.ttl for p in _long_lived_first(placed)] == ["1h", "5m"]


def test_a_long_document_before_the_question_is_a_boundary() -> None:
    b = body("x")
    b["messages"][1]["content"] = [{"type": "text", "text": DOC}, {"type": "text", "text": "Q?"}]
    assert [x.kind for x in boundaries(b, document_tokens=1024)] == [
        "system",
        "document",
        "history",
    ]


def test_odd_content_is_skipped_not_failed() -> None:
    b = body("x")
    b["messages"][1]["content"] = [1, None, {"type": "text", "text": "ok"}]
    b["messages"].append({"role": "user", "content": 5})
    kinds = [x.kind for x in boundaries(b, document_tokens=1024)]
    assert kinds == ["system"]
