"""Shadow comparisons for cascades and routes: did a cheap answer keep the strong model's quality?
Pure; the shadow workers (layers/shadow.py, for layers/cascade/shadow.py and
layers/route_shadow.py) make the calls.

The counterfactual. A cascade returns the cheap model's answer when a confidence check passes;
what it cannot know on the request path is whether the strong model would have answered
differently. A shadow sample asks the strong model anyway, off the request path, and compares.
The strong model is the reference: an accepted answer that agrees with it is taken to have lost
nothing, one that disagrees to have lost everything. Agreement is a proxy for quality, not quality
itself: the strong model is sometimes wrong where the cheap one was right (so retention is
understated), and two different wordings of one correct answer disagree under `normalized`
(understated again) while a shared mistake agrees (overstated). For short answers (a label, a
choice letter, a number) `normalized` measures agreement well; for open-ended text a judge that
reads both answers (`compare: judge`) is the better proxy, at the price of one more call.

    retention = 1 - accepted_share x disagree / (agree + disagree)

Requests the cascade escalated were answered by the strong model (retained by definition), and
so were the ones that fell back to the cheap answer because the strong step failed (without the
cascade they would have been that failure); accepted requests keep quality at the measured
agreement rate, which the samples estimate for every accepted request (sampling is uniform).
A route reads the same way: what it sent to its default (the strong alias) is retained by
definition, what it sent to another alias is "accepted" (`accepted` counts those).
With no sample compared yet nothing is measured: `retention` is None, and the gauge is absent.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

from levergate.policies.confidence import conversation_text, judge_score

# Stripped from both ends of a normalized answer: spacing, sentence punctuation, brackets,
# quotes and markdown emphasis. Not signs or currency: "-5" and "5" must not agree.
_SURROUNDING = " .,;:!?'\"`()[]{}<>*_~\u201c\u201d\u2018\u2019\u00ab\u00bb\u3002\uff0c\uff01\uff1f"
_SPACE = re.compile(r"\s+")
_NUMBER = r"[-+]?\d[\d,]*(?:\.\d+)?"
# An explicit final answer: "the answer is (B)", "Answer: 42", "#### 42" (GSM8K's marker). The
# choice letter must be a capital that ends there ("the answer is A bit..." names no choice);
# a number must end the sentence ("the answer is 5 apples" is not compared as 5).
_END = r"(?=[\s.,;!)*]*$|[.,;!)*]+\s)"
_MARKER = r"(?:(?i:answer)\s*(?:(?i:is)\s*)?[:=]?\s*|####\s*)"
_FINAL = re.compile(rf"{_MARKER}\(?\**(?:(?P<letter>[A-J])\)?|(?P<number>{_NUMBER})){_END}")
_LONE_LETTER = re.compile(r"[a-j]")
_LONE_NUMBER = re.compile(_NUMBER)
_MAX_NUMBER_CHARS = 100
_YES_NO = re.compile(r"\W*(yes|no|equivalent|different)\b", re.IGNORECASE)

SHADOW_JUDGE_SYSTEM = (
    "You compare two answers to the same conversation. Reply with one number between 0 and 1 "
    "and nothing else: the probability that the two answers are equivalent, that is, they reach "
    "the same result and either would serve the user as well as the other."
)


def normalized(text: str) -> str:
    """`text` compatibility-normalized (NFKC), case-folded, its spacing collapsed to single
    spaces and its surrounding punctuation stripped. Idempotent. Upper-cased before folding:
    casefold alone keeps a dotless i (U+0131) apart from the "i" its own capital "I" folds to."""
    folded = _fold(text)
    while (again := _fold(folded)) != folded:
        folded = again  # a few characters fold in two rounds
    return _SPACE.sub(" ", folded).strip(_SURROUNDING)


def _fold(text: str) -> str:
    return unicodedata.normalize("NFKC", text).upper().casefold()


def final_answer(text: str) -> str | None:
    """The answer's final choice letter ("b") or number ("42", "3.5"), when it states one: the
    last explicit "answer is ..." / "#### ..." marker, or the whole answer being just a letter or
    a number. None when it states none (then only the whole texts are compared)."""
    found = None
    for match in _FINAL.finditer(text):
        found = match
    if found is not None:
        letter, number = found.group("letter"), found.group("number")
        return letter.lower() if letter else _number(number)
    whole = normalized(text)
    if _LONE_LETTER.fullmatch(whole):
        return whole
    if _LONE_NUMBER.fullmatch(whole):
        return _number(whole)
    return None


def _number(text: str) -> str | None:
    """A number's one spelling ("3.50" and "3.5", "1,000" and "1000", "+7" and "007" agree),
    exact: from its digits, never rounded. None past `_MAX_NUMBER_CHARS` (then only the texts are
    compared): an answer's number is the model's output, and it can be a megabyte of digits."""
    digits = text.replace(",", "")
    if len(digits) > _MAX_NUMBER_CHARS:
        return None
    sign = "-" if digits.startswith("-") else ""
    whole, _, fraction = digits.lstrip("+-").partition(".")
    whole, fraction = whole.lstrip("0") or "0", fraction.rstrip("0")
    if whole == "0" and not fraction:
        return "0"
    return sign + whole + ("." + fraction if fraction else "")


def agree(cheap: str, strong: str) -> bool:
    """`compare: normalized`: the two answers are equal once normalized, or state the same
    final choice letter or number."""
    if normalized(cheap) == normalized(strong):
        return True
    ours = final_answer(cheap)
    return ours is not None and ours == final_answer(strong)


def equivalence_messages(
    messages: Sequence[Mapping[str, Any]], cheap: str, strong: str, *, max_chars: int
) -> list[dict[str, str]]:
    """`compare: judge`'s prompt: the conversation (its newest `max_chars`) and both answers."""
    conversation = conversation_text(messages, max_chars=max_chars)
    user = (
        f"Conversation:\n{conversation}\n\nFirst answer:\n{cheap[-max_chars:]}\n\n"
        f"Second answer:\n{strong[-max_chars:]}"
    )
    return [{"role": "system", "content": SHADOW_JUDGE_SYSTEM}, {"role": "user", "content": user}]


def equivalence_score(text: str | None) -> float | None:
    """The judge's reply as a probability of equivalence: a leading yes / no (1 / 0), else its
    first number in [0, 1]; None when it gave neither (the sample failed)."""
    if not text:
        return None
    word = _YES_NO.match(text)
    if word is not None:
        return 1.0 if word.group(1).lower() in ("yes", "equivalent") else 0.0
    return judge_score(text)


def retention(*, accepted: int, answered: int, agree: int, disagree: int) -> float | None:
    """The estimated share of the strong model's quality a cascade kept (module docstring):
    `accepted` of `answered` requests were accepted cheap answers, and of the samples compared
    `agree` agreed with the strong model and `disagree` did not. None before any comparison."""
    if min(accepted, answered, agree, disagree) < 0 or accepted > answered:
        raise ValueError("counts must be non-negative, accepted at most answered")
    compared = agree + disagree
    if not compared or not answered:
        return None
    return 1.0 - (accepted / answered) * (disagree / compared)
