"""Prompt-lookup drafts and their verification, as properties over token lists."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from levergate.upstreams.local.speculative import next_limit, propose, verify

histories = st.lists(st.integers(min_value=0, max_value=4), min_size=0, max_size=40)


def arr(values: list[int]) -> np.ndarray:
    return np.asarray(values, dtype=np.int32)


@given(histories, st.integers(min_value=1, max_value=4), st.integers(min_value=1, max_value=8))
def test_a_draft_continues_an_earlier_occurrence_of_the_suffix(
    history: list[int], ngram_max: int, limit: int
) -> None:
    draft = propose(arr(history), ngram_min=1, ngram_max=ngram_max, limit=limit)
    assert len(draft) <= limit
    if not draft:
        # Nothing recurs: not even the last token appears earlier followed by something.
        assert len(history) < 2 or history[-1] not in history[:-1]
        return
    n = len(history)
    found = any(
        history[i - k : i] == history[n - k :] and history[i : i + len(draft)] == draft
        for k in range(1, ngram_max + 1)
        for i in range(k, n)
        if k < n
    )
    assert found


def test_the_longest_ngram_and_the_latest_occurrence_win() -> None:
    history = [7, 1, 2, 3, 9, 9, 5, 2, 3, 8, 8, 1, 2, 3]
    # "1 2 3" occurred at 1..3 (followed by 9 9) and "2 3" later at 7..8 (followed by 8 8):
    # the trigram wins over the more recent bigram.
    assert propose(arr(history), ngram_min=1, ngram_max=3, limit=2) == [9, 9]
    assert propose(arr(history), ngram_min=1, ngram_max=2, limit=2) == [8, 8]
    assert propose(arr([1, 2, 3]), ngram_min=1, ngram_max=3, limit=4) == []


@given(st.lists(st.integers(0, 3), max_size=8), st.lists(st.integers(0, 3), min_size=9, max_size=9))
def test_verify_keeps_the_agreeing_prefix_and_the_first_own_choice(
    draft: list[int], model: list[int]
) -> None:
    kept = verify(draft, lambda j: model[j])
    assert 1 <= len(kept) <= len(draft) + 1
    assert kept == model[: len(kept)]
    agreed = len(kept) - 1
    assert draft[:agreed] == model[:agreed]
    if agreed < len(draft):
        assert model[agreed] != draft[agreed]


def test_verify_asks_only_for_the_positions_it_needs() -> None:
    asked: list[int] = []

    def choose(j: int) -> int:
        asked.append(j)
        return [5, 6, 0][j]

    assert verify([5, 6, 7, 8], choose) == [5, 6, 0]
    assert asked == [0, 1, 2]


@given(st.integers(1, 16), st.integers(0, 16), st.integers(0, 16), st.integers(1, 16))
def test_the_draft_length_adapts_within_its_bounds(
    limit: int, proposed: int, accepted: int, ceiling: int
) -> None:
    accepted = min(accepted, proposed)
    limit = min(limit, ceiling)
    after = next_limit(limit, proposed=proposed, accepted=accepted, ceiling=ceiling)
    assert 1 <= after <= ceiling
    if proposed and accepted == proposed:
        assert after >= limit
    elif proposed:
        assert after <= limit
