"""Guards for the semantic cache: reasons two close texts must NOT share an answer. Pure.

An embedding puts "How do I cancel my subscription?" and "How do I change my subscription?" a
hair apart, and likewise texts that differ only in a number, a date, a name or a "not" — exactly
the differences that change the right answer (REFERENCE.md: real near-misses sit at cosine
>= 0.95). So after the nearest neighbour clears the threshold, `conflicts` compares the two texts
on the features an embedding blurs and names every guard that objects:

    negation    a different number of negations (not, no, never, n't, without ...)
    numbers     different numbers, digits or words ("two" == "2")
    dates       different months, weekdays, or relative days (today, tomorrow ...)
    entities    a name, acronym, code token, URL or quoted string in one text and not the other
    key_terms   a different action or polarity word (cancel / change, buy / sell, max / min ...)
    swapped     a content word replaced by another in otherwise-matching texts
    order       the same content words in a different order ("A beats B" / "B beats A")

Each guard errs on the side of a miss: a rejected paraphrase costs one upstream call, a wrong
hit costs a wrong answer. Their effect on recall is measured in benchmarks/cache_semantic_eval.py.
"""

from __future__ import annotations

import difflib
import re
from collections import Counter
from functools import lru_cache


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


_WORD = re.compile(r"[A-Za-z0-9]+(?:[.,][0-9]+)*(?:'[A-Za-z]+)?")
_ENTITY_SHAPES = re.compile(
    r"https?://\S+|\S+@\S+\.\w+|\"[^\"]+\"|`[^`]+`|\b\w+(?:[_/.]\w+)+\b|\b[a-z]+[A-Z]\w*\b"
)
NEGATIONS = _words(
    "not no never none nobody nothing neither nor nowhere cannot without "
    "dont doesnt didnt isnt arent wasnt werent wont cant couldnt shouldnt wouldnt"
)
_SMALL_NUMBERS = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen twenty"
)
_NUMBER_WORDS = {
    w: str(i) for i, w in enumerate(_SMALL_NUMBERS.split())
} | {"thirty": "30", "forty": "40", "fifty": "50", "hundred": "100", "thousand": "1000",
     "million": "1e6", "billion": "1e9", "half": "0.5", "once": "1x", "twice": "2x",
     "first": "1st", "second": "2nd", "third": "3rd", "dozen": "12"}  # fmt: skip
DATE_WORDS = _words(
    "january february march april may june july august september october november december "
    "jan feb mar apr jun jul aug sep sept oct nov dec monday tuesday wednesday thursday "
    "friday saturday sunday today tomorrow yesterday tonight weekend morning evening night "
    "daily weekly monthly yearly annually now currently latest recent past future"
)
# Words whose swap flips the answer. Each group's members exclude one another.
_CONTRAST_GROUPS = (
    "cancel change pause resume renew upgrade downgrade transfer refund extend",
    "create delete remove add update edit reset restore rename copy move merge split",
    "buy sell rent lease borrow lend pay charge",
    "enable disable activate deactivate block unblock install uninstall",
    "start stop begin end finish open close launch quit",
    "increase decrease raise lower reduce grow shrink",
    "upload download import export send receive",
    "login logout signin signout signup subscribe unsubscribe register",
    "more less fewer most least",
    "before after during",
    "best worst better worse good bad",
    "max min maximum minimum highest lowest higher lower",
    "first last",
    "cheap expensive cheapest",
    "male female men women man woman boy girl",
    "positive negative pros cons advantages disadvantages benefits risks",
    "accept reject approve deny allow forbid",
    "win lose won lost",
    "encrypt decrypt compress decompress",
    "north south east west",
)
STOPWORDS = _words(
    "a an the of to in on for at by with from about as into is are was were be been being am "
    "do does did doing have has had i me my we our you your he she it its they them their "
    "this that these those what which who whom whose how why when where can could should would "
    "will shall may might must there here and or but if so than then also just very really "
    "some any all each every much many get got anyone someone something"
)


def conflicts(query: str, cached: str, *, enabled: frozenset[str] | None = None) -> tuple[str, ...]:
    """The guards that object to serving `cached`'s answer for `query` (empty: no objection).
    `enabled` limits which guards may object (None: all of them)."""
    a, b = _features(query), _features(cached)
    found: list[str] = []
    if a.negations != b.negations:
        found.append("negation")
    if a.numbers != b.numbers:
        found.append("numbers")
    if a.dates != b.dates:
        found.append("dates")
    if not a.entities <= b.vocabulary or not b.entities <= a.vocabulary:
        found.append("entities")
    if a.contrast != b.contrast:
        found.append("key_terms")
    if _swapped(a.content, b.content) or _swapped(b.content, a.content):
        found.append("swapped")
    if a.content != b.content and Counter(a.content) == Counter(b.content):
        found.append("order")
    if enabled is not None:
        return tuple(name for name in found if name in enabled)
    return tuple(found)


class _Features:
    __slots__ = ("content", "contrast", "dates", "entities", "negations", "numbers", "vocabulary")

    def __init__(self, text: str) -> None:
        words = [w.replace("'", "") for w in _WORD.findall(text)]
        lower = [w.lower() for w in words]
        self.vocabulary = frozenset(lower) | frozenset(stem(w) for w in lower)
        self.negations = sum(
            1 for w in lower if w in NEGATIONS or (w.endswith("nt") and w[:-2] in _AUX)
        )
        self.numbers = frozenset(_number(w) for w in lower if _number(w) is not None)
        self.dates = frozenset(w for w in lower if w in DATE_WORDS)
        self.entities = frozenset(_entities(text, words))
        self.contrast = frozenset(stem(w) for w in lower if stem(w) in _contrast())
        self.content = tuple(stem(w) for w in lower if w not in STOPWORDS and w not in NEGATIONS)


_AUX = _words("do does did is are was were wo ca could should would have has had must")


@lru_cache(maxsize=4096)
def _features(text: str) -> _Features:
    return _Features(text)


def _number(word: str) -> str | None:
    if word in _NUMBER_WORDS:
        return _NUMBER_WORDS[word]
    digits = word.replace(",", "")
    if digits[:1].isdigit():
        return digits.rstrip("stndrh") or digits
    return None


def _entities(text: str, words: list[str]) -> list[str]:
    """Names by shape: capitalised words not opening a sentence, acronyms, mixed letters and
    digits, and code-like or quoted spans. Lower-cased so "Paris" matches "paris"."""
    found = [m.group(0).strip('"`').lower() for m in _ENTITY_SHAPES.finditer(text)]
    starts = {m.end() for m in re.finditer(r"(?:^|[.!?]\s+)", text)}
    for match in _WORD.finditer(text):
        word = match.group(0)
        if word.lower() in STOPWORDS or word.lower() in _NUMBER_WORDS:
            continue
        capital = word[:1].isupper() and match.start() not in starts
        acronym = len(word) > 1 and word.isupper()
        mixed = any(c.isdigit() for c in word) and any(c.isalpha() for c in word)
        if capital or acronym or mixed:
            found.append(word.replace("'", "").lower())
    del words
    return [stem(f) if " " not in f else f for f in found]


def _swapped(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """True when the texts line up word for word except where one content word stands in for
    another: the shape of "cancel my plan" / "change my plan"."""
    if not a or not b or a == b:
        return False
    matcher = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    if matcher.ratio() < 0.6:
        return False  # a real rewrite: leave it to the threshold and the other guards
    return any(op == "replace" for op, *_ in matcher.get_opcodes())


@lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """A crude English stem, enough to match plural and tense variants of a word: "cancelled",
    "cancels" and "cancel" share one, as do "change", "changed" and "changing"."""
    base = word
    if word.endswith("ies") and len(word) > 4:
        base = word[:-3] + "y"
    elif word.endswith(("sses", "shes", "ches", "xes", "zes")):
        base = word[:-2]
    elif word.endswith("s") and not word.endswith("ss") and len(word) > 3:
        base = word[:-1]
    elif word.endswith("ing") and len(word) > 5:
        base = word[:-3]
    elif word.endswith("ed") and len(word) > 4:
        base = word[:-2]
    doubled = len(base) > 3 and base[-1] == base[-2] and base[-1] not in "aeiouls"
    if base != word and (doubled or (base.endswith("ll") and len(base) > 5)):
        base = base[:-1]
    return base[:-1] if base.endswith("e") and len(base) > 3 else base


@lru_cache(maxsize=1)
def _contrast() -> dict[str, int]:
    return {stem(w): group for group, words in enumerate(_CONTRAST_GROUPS) for w in words.split()}
