"""Shadow comparisons: normalization, final answers, the judge's reply, and the retention formula
worked by hand."""

from __future__ import annotations

import pytest

from levergate.policies.shadow import (
    SHADOW_JUDGE_SYSTEM,
    agree,
    equivalence_messages,
    equivalence_score,
    final_answer,
    normalized,
    retention,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("  Paris. ", "paris"),
        ("PARIS", "paris"),
        ('"Paris!"', "paris"),
        ("**Paris**", "paris"),
        ("New\n\t York", "new york"),
        ("\u201cParis\u201d", "paris"),
        ("-5", "-5"),  # a sign is not punctuation
        ("$5", "$5"),
        ("\uff30aris", "paris"),  # a full-width letter, compatibility-normalized
        ("Stra\u00dfe", "strasse"),  # case folding, not only lowercasing
        ("...", ""),
    ],
)
def test_normalized(text: str, expected: str) -> None:
    assert normalized(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The answer is (B).", "b"),
        ("Answer: C", "c"),
        ("answer is **D**", "d"),
        ("First A looks right, but the final answer is B.", "b"),
        ("The answer is A bit more subtle than that.", None),  # "A" is an article here
        ("the answer is a.", None),  # choices are capitals after a marker
        ("B", "b"),
        ("(c)", "c"),
        ("So 6 x 7 = 42.\n#### 42", "42"),
        ("The answer is 3.50.", "3.5"),
        ("The answer is 1,000", "1000"),
        ("The answer is -2", "-2"),
        ("The answer is 5 apples.", None),  # a number with a unit is compared as text
        ("42", "42"),
        ("0.0", "0"),
        ("Because the sky scatters blue light.", None),
        ("I answered 5.", None),
    ],
)
def test_final_answer(text: str, expected: str | None) -> None:
    assert final_answer(text) == expected


@pytest.mark.parametrize(
    ("cheap", "strong", "same"),
    [
        ("Paris", "paris.", True),
        ("B", "After weighing the options, the answer is (B).", True),
        ("The answer is 42.", "#### 42", True),
        ("The answer is 3.5", "The answer is 3.50.", True),
        ("A", "The answer is (B).", False),
        ("-5", "5", False),
        ("Paris", "Lyon", False),
        ("Paris is the capital.", "The capital is Paris.", False),  # wording: a judge's job
        ("The answer is 5 apples.", "The answer is 5 pears.", False),
    ],
)
def test_agree(cheap: str, strong: str, same: bool) -> None:
    assert agree(cheap, strong) is same
    assert agree(strong, cheap) is same


@pytest.mark.parametrize(
    ("reply", "score"),
    [
        ("Yes", 1.0),
        ("yes, they match", 1.0),
        ("No.", 0.0),
        ("0.8", 0.8),
        ("Probability: 0.25", 0.25),
        ("1.5", None),
        ("maybe", None),
        ("", None),
        (None, None),
    ],
)
def test_equivalence_score(reply: str | None, score: float | None) -> None:
    assert equivalence_score(reply) == score


def test_the_judge_sees_the_conversation_and_both_answers_within_bounds() -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Capital?"}]
    system, user = equivalence_messages(messages, "Paris", "x" * 500 + "Lyon", max_chars=300)
    assert system == {"role": "system", "content": SHADOW_JUDGE_SYSTEM}
    text = user["content"]
    assert "system: Be brief.\nuser: Capital?" in text
    assert "First answer:\nParis" in text
    assert text.endswith("x" * 296 + "Lyon")  # the newest 300 characters of a long answer
    assert "x" * 301 not in text


def test_retention_worked_by_hand() -> None:
    # 100 answered, 60 accepted; of 20 samples 15 agreed, 5 did not: 1 - 0.6 x 0.25 = 0.85.
    assert retention(accepted=60, answered=100, agree=15, disagree=5) == pytest.approx(0.85)
    # Every accepted answer disagreed, but only half the requests were accepted: 0.5.
    assert retention(accepted=2, answered=4, agree=0, disagree=2) == pytest.approx(0.5)
    # Nothing accepted (all escalated): the strong model answered everything.
    assert retention(accepted=0, answered=7, agree=0, disagree=1) == 1.0
    assert retention(accepted=3, answered=3, agree=3, disagree=0) == 1.0
    assert retention(accepted=3, answered=3, agree=0, disagree=3) == 0.0


def test_retention_is_unmeasured_without_a_compared_sample() -> None:
    assert retention(accepted=10, answered=10, agree=0, disagree=0) is None
    assert retention(accepted=0, answered=0, agree=1, disagree=0) is None


@pytest.mark.parametrize(
    "counts",
    [
        {"accepted": -1, "answered": 1, "agree": 1, "disagree": 0},
        {"accepted": 2, "answered": 1, "agree": 1, "disagree": 0},
        {"accepted": 1, "answered": 1, "agree": 1, "disagree": -1},
    ],
)
def test_retention_refuses_impossible_counts(counts: dict[str, int]) -> None:
    with pytest.raises(ValueError, match="non-negative"):
        retention(**counts)


def test_a_dotless_i_agrees_with_its_own_capital() -> None:
    # Found by Hypothesis: casefold() keeps U+0131 as it is but folds "I" to "i".
    assert agree("\u0131", "  I\n")


def test_numbers_compare_exactly_and_a_huge_one_only_as_text() -> None:
    # 31 digits: rounding to a 28-digit context would have made these two the same number.
    assert not agree("The answer is 1234567890123456789012345678901",
                     "The answer is 1234567890123456789012345678902")  # fmt: skip
    assert agree("The answer is 1,234.50", "Answer: 1234.5")
    assert agree("#### -0.0", "The answer is 0")
    assert final_answer("The answer is 007.") == "7"
    # A megabyte of digits (a model's output) is neither parsed nor an error: texts compared.
    huge = "The answer is " + "9" * 1_000_000 + "."
    assert final_answer(huge) is None
    assert not agree(huge, "The answer is " + "9" * 999_999 + "8.")
    assert agree(huge, huge)
