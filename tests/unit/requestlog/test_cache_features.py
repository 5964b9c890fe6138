"""The prompt-cache part of the replay features: the client's `prompt_cache_key` as a digest, and
the boundaries the breakpoint layer decides by — the same ones, and the same decisions, as the
layer itself makes on the body; the analyzer reads them back and drops what is malformed."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from levergate.analyze.inputs import cache_features
from levergate.config.prompt_cache import BreakpointsSettings
from levergate.layers.prompt_cache.breakpoints import Boundary, Placer
from levergate.requestlog.features import MAX_BOUNDARIES, features_of_body

SYSTEM = "Answer as the billing team would. " * 200


def body(*turns: str, key: str | None = None, parts: int = 1) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    for n, text in enumerate(turns):
        role = "user" if n % 2 == 0 else "assistant"
        content: Any = text if parts == 1 else [{"type": "text", "text": text}] * parts
        messages.append({"role": role, "content": content})
    found: dict[str, Any] = {"model": "m", "messages": messages}
    if key is not None:
        found["prompt_cache_key"] = key
    return found


def test_the_clients_key_is_kept_as_a_digest_only() -> None:
    keyed = features_of_body(body("hi", key="user-42"), kind="chat", model="m")
    assert "user-42" not in orjson.dumps(keyed).decode()
    assert (
        keyed["pck"] == features_of_body(body("yo", key="user-42"), kind="chat", model="m")["pck"]
    )
    assert "pck" not in features_of_body(body("hi"), kind="chat", model="m")


def test_a_next_turn_names_the_prompt_it_continues() -> None:
    first = features_of_body(body("What is due?"), kind="chat", model="m")
    second = features_of_body(body("What is due?", "Nothing.", "And next month?"), kind="chat",
                              model="m")  # fmt: skip
    assert second["cont"] == first["whole"]
    assert "cont" not in first
    assert [b[0] for b in first["bp"]] == ["system", "history"]


def test_many_documents_keep_the_prompts_own_boundaries_within_the_bound() -> None:
    long = "A retrieved passage about invoices. " * 150
    found = features_of_body(body(long, parts=30), kind="chat", model="m")
    kinds = [b[0] for b in found["bp"]]
    assert len(kinds) == MAX_BOUNDARIES
    assert kinds[0] == "system"
    assert kinds[-1] == "history"
    assert [b[1] for b in found["bp"]] == sorted(b[1] for b in found["bp"])


turns = st.lists(st.sampled_from(["short", "A long passage. " * 300, "What now?"]), min_size=1,
                 max_size=5)  # fmt: skip


@settings(max_examples=30)
@given(st.lists(st.tuples(turns, st.floats(0, 4000)), min_size=1, max_size=8))
def test_the_logged_boundaries_give_the_layers_own_decisions(
    prompts: list[tuple[list[str], float]],
) -> None:
    """Two placers, one fed the bodies (as the gateway's layer), one the logged features read
    back (as the analyzer): the same breakpoints at the same TTLs, request after request."""
    live, replayed = Placer(BreakpointsSettings()), Placer(BreakpointsSettings())
    for texts, at in sorted(prompts, key=lambda p: p[1]):
        sent = body(*texts)
        _, placed = live.place(sent, now=at)
        logged = cache_features(orjson.loads(orjson.dumps(
            features_of_body(sent, kind="chat", model="m"))))  # fmt: skip
        found = [Boundary(k, -1, -1, t, d) for k, t, d in logged["bp"]]
        again = replayed.decide(found, logged["cont"], logged["whole"], taken=0, now=at)
        assert [(p.boundary.kind, p.boundary.tokens, p.boundary.digest, p.ttl) for p in placed] == [
            (p.boundary.kind, p.boundary.tokens, p.boundary.digest, p.ttl) for p in again
        ]


def test_malformed_cache_features_are_left_out() -> None:
    read = cache_features(
        {
            "pck": 7,
            "bp": [
                ["system", 10, 5],
                ["bogus", 1, 2],
                ["history", -1, 3],
                "x",
                ["history", 20, 2**64],
            ],
            "cont": "x",
            "cbp": True,
        }
    )
    assert read == {"pck": None, "bp": (("system", 10, 5),), "cont": None, "whole": None,
                    "cbp": 0}  # fmt: skip
