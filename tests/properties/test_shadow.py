"""Invariants of the shadow comparison: normalization is idempotent, an answer always agrees with
itself and with its own re-spacing and re-casing, agreement is symmetric, and retention stays in
[0, 1], falling as disagreement or the accepted share grows."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from levergate.policies.shadow import agree, final_answer, normalized, retention

texts = st.text(max_size=200)


@given(texts)
def test_normalization_is_idempotent(text: str) -> None:
    once = normalized(text)
    assert normalized(once) == once


@given(texts)
def test_an_answer_agrees_with_itself_however_it_is_spaced_and_cased(text: str) -> None:
    assert agree(text, text)
    assert agree(text, f"  {text.upper()}\n")
    assert agree(text, f"{text}.")


@given(texts, texts)
def test_agreement_is_symmetric(a: str, b: str) -> None:
    assert agree(a, b) == agree(b, a)


@given(texts)
def test_a_final_answer_is_a_letter_or_a_plain_number(text: str) -> None:
    found = final_answer(text)
    if found is not None:
        assert (len(found) == 1 and "a" <= found <= "j") or float(found) == float(found)
        assert found == found.strip().lower()


counts = st.integers(min_value=0, max_value=10_000)


@given(counts, counts, counts, counts, counts)
def test_retention_is_a_share_that_falls_with_disagreement(
    accepted: int, escalated: int, agreeing: int, disagreeing: int, more: int
) -> None:
    answered = accepted + escalated
    kept = retention(accepted=accepted, answered=answered, agree=agreeing, disagree=disagreeing)
    if not answered or not agreeing + disagreeing:
        assert kept is None
        return
    assert kept is not None
    assert 0.0 <= kept <= 1.0
    worse = retention(accepted=accepted, answered=answered, agree=agreeing,
                      disagree=disagreeing + more)  # fmt: skip
    assert worse is not None
    assert worse <= kept + 1e-12
    riskier = retention(accepted=accepted + more, answered=answered + more, agree=agreeing,
                        disagree=disagreeing)  # fmt: skip
    assert riskier is not None
    assert riskier <= kept + 1e-12
