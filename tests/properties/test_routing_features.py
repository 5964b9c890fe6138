"""The router's structure features, counted in C on the UTF-8 bytes, equal a plain count of the
same characters, for any text (multi-byte characters and lone surrogates included), and only
the head of a long prompt is read for the shares."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from levergate.routing.features import STRUCTURE, TEXT_CAP, structure

MATH = set("=+^*/<>$\\|%")


def by_hand(text: str) -> list[float]:
    head = text[:TEXT_CAP]
    chars = max(len(head), 1)
    return [
        sum("0" <= c <= "9" for c in head) / chars,
        sum("A" <= c <= "Z" for c in head) / chars,
        sum(c in MATH for c in head) / chars,
    ]


@given(st.text(alphabet=st.characters(exclude_categories=()), max_size=300))
def test_the_shares_count_exactly_what_a_loop_counts(text: str) -> None:
    got = structure(text)
    assert len(got) == len(STRUCTURE)
    assert got[3:6] == by_hand(text)
    assert got[0] == math.log1p(len(text))


def test_a_long_prompt_is_measured_whole_and_read_by_its_head() -> None:
    text = "Ab1=" * (TEXT_CAP // 4) + "xyz " * 50_000
    got = structure(text)
    assert got[0] == math.log1p(len(text))
    assert got[3:6] == [0.25, 0.25, 0.25]  # the tail of lower-case words is past the head
