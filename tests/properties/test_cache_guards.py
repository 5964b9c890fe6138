"""Properties of the semantic-cache guards."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from levergate.policies.guards import conflicts

VOCABULARY = (
    "how do i set up my account password email phone order the a for with from what is best "
    "way to learn python cook rice travel paris book flight"
)
WORDS = st.sampled_from(VOCABULARY.split())
SENTENCE = st.lists(WORDS, min_size=2, max_size=12).map(" ".join)


@given(SENTENCE)
def test_a_text_never_conflicts_with_itself(text: str) -> None:
    assert conflicts(text, text) == ()


@given(SENTENCE, SENTENCE)
def test_conflicts_are_symmetric(a: str, b: str) -> None:
    assert set(conflicts(a, b)) == set(conflicts(b, a))


@given(SENTENCE, st.integers(0, 999), st.integers(0, 999))
def test_different_numbers_always_conflict(text: str, x: int, y: int) -> None:
    found = conflicts(f"{text} {x}", f"{text} {y}")
    assert ("numbers" in found) == (x != y)


@given(SENTENCE)
def test_adding_a_negation_always_conflicts(text: str) -> None:
    assert "negation" in conflicts(text, f"not {text}")
    assert "negation" in conflicts(f"how do i {text}", f"how don't i {text}")


@given(SENTENCE, st.sampled_from(["monday", "june", "tomorrow", "2024"]))
def test_adding_a_date_always_conflicts(text: str, when: str) -> None:
    assert conflicts(text, f"{text} {when}") != ()


@given(SENTENCE, st.sampled_from(["Microsoft", "NASA", "iPhone15", "Berlin"]))
def test_a_new_name_always_conflicts(text: str, name: str) -> None:
    assert "entities" in conflicts(text, f"{text} in {name}")


@given(st.sampled_from([("cancel", "change"), ("buy", "sell"), ("enable", "disable"),
                        ("upload", "download"), ("maximum", "minimum")]), SENTENCE)  # fmt: skip
def test_contrasting_actions_always_conflict(pair: tuple[str, str], rest: str) -> None:
    a, b = pair
    assert "key_terms" in conflicts(f"how do i {a} {rest}", f"how do i {b} {rest}")
