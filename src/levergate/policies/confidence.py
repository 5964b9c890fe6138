"""Confidence signals for cascades: is a cheap model's answer good enough to return? Pure.

Each configured check (config/cascade.py) compiles once, at start-up, into a `Signal`: a frozen
value that reads a whole chat answer (the parsed `chat.completion`) and gives a `Verdict` —
passed or not, the score it judged on (for the metrics' distribution) and why. The cascade layer
(layers/cascade.py) runs the signals in order and escalates on the first that fails.

Every signal fails closed: an answer with no logprobs where a logprob check needs them, no text,
or a score out of range fails, and the cascade escalates. A missing signal can only cost money
(a stronger call), never quality (an unchecked cheap answer returned).

The judge is the one signal that needs a model call; its pure halves are here (`judge_messages`
builds the grading prompt, `judge_score` reads the judge's reply) and the layer makes the call.
JSON schemas are checked with `jsonschema`, the reference implementation of the specification
(every draft through 2020-12, `check_schema` to refuse a broken schema at start-up); one
validation costs microseconds next to the model call it may save, so the compiled-code speed of
`fastjsonschema` (drafts up to 7 only) buys nothing here.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from levergate.config.cascade import (
    Check,
    ConfidenceFieldSettings,
    JsonSchemaSettings,
    JudgeSettings,
    MeanLogprobSettings,
    MinLogprobSettings,
    MustParseSettings,
    RegexSettings,
)
from levergate.core.json_bound import parse_json
from levergate.protocol.openai.body import content_text


@dataclass(frozen=True, slots=True)
class Verdict:
    signal: str  # the check's kind: "mean_logprob", "json_schema", "judge", ...
    passed: bool
    score: float | None = None  # what it judged on (a logprob, a confidence), when numeric
    reason: str = ""

    @classmethod
    def failed(cls, signal: str, reason: str) -> Verdict:
        return cls(signal, passed=False, reason=reason)

    @classmethod
    def scored(cls, signal: str, score: float, threshold: float) -> Verdict:
        """Passed when `score` reaches `threshold`; the reason shows the comparison."""
        passed = score >= threshold
        cmp = ">=" if passed else "<"
        return cls(signal, passed=passed, score=score, reason=f"{score:.3f} {cmp} {threshold}")


class Signal(Protocol):
    @property
    def kind(self) -> str: ...

    def __call__(self, data: Mapping[str, Any], /) -> Verdict: ...


# ---- reading an answer ------------------------------------------------------------------


def answer_text(data: Mapping[str, Any]) -> str | None:
    """The first choice's message content, or None when there is none (a tool call, a refusal)."""
    choice = _first_choice(data)
    message = choice.get("message") if choice else None
    content = message.get("content") if isinstance(message, Mapping) else None
    return content if isinstance(content, str) else None


def token_logprobs(data: Mapping[str, Any]) -> list[float] | None:
    """The first choice's content token logprobs in OpenAI's shape (`choices[0].logprobs.content
    [i].logprob`), or None when the upstream sent none."""
    choice = _first_choice(data)
    logprobs = choice.get("logprobs") if choice else None
    content = logprobs.get("content") if isinstance(logprobs, Mapping) else None
    if not isinstance(content, list) or not content:
        return None
    values: list[float] = []
    for entry in content:
        value = entry.get("logprob") if isinstance(entry, Mapping) else None
        if not isinstance(value, int | float) or isinstance(value, bool) or math.isnan(value):
            return None
        values.append(float(value))
    return values


def _first_choice(data: Mapping[str, Any]) -> Mapping[str, Any] | None:
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        return None
    return choices[0]


# ---- the signals ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LogprobSignal:
    """Mean or least token logprob of the answer against a threshold (`use_min`)."""

    threshold: float
    use_min: bool = False

    @property
    def kind(self) -> str:
        return "min_logprob" if self.use_min else "mean_logprob"

    def __call__(self, data: Mapping[str, Any]) -> Verdict:
        values = token_logprobs(data)
        if values is None:
            return Verdict.failed(self.kind, "no logprobs in the answer")
        score = min(values) if self.use_min else math.fsum(values) / len(values)
        return Verdict.scored(self.kind, score, self.threshold)


@dataclass(frozen=True, slots=True)
class ParseSignal:
    """The answer parses as JSON; with `validator`, it also validates against the schema."""

    validator: Any = None  # a jsonschema validator instance, built once

    @property
    def kind(self) -> str:
        return "json" if self.validator is None else "json_schema"

    def __call__(self, data: Mapping[str, Any]) -> Verdict:
        text = answer_text(data)
        if text is None:
            return Verdict.failed(self.kind, "no text to parse")
        try:
            value = parse_json(_unfenced(text))
        except orjson.JSONDecodeError as exc:
            return Verdict.failed(self.kind, f"not JSON: {exc}")
        if self.validator is not None:
            error = next(iter(self.validator.iter_errors(value)), None)
            if error is not None:
                where = "/".join(str(p) for p in error.absolute_path) or "(root)"
                return Verdict.failed(self.kind, f"schema: {where}: {error.message}"[:300])
        return Verdict(self.kind, passed=True, reason="valid")


@dataclass(frozen=True, slots=True)
class RegexSignal:
    pattern: re.Pattern[str]
    full: bool = False

    @property
    def kind(self) -> str:
        return "regex"

    def __call__(self, data: Mapping[str, Any]) -> Verdict:
        text = answer_text(data)
        if text is None:
            return Verdict.failed(self.kind, "no text to match")
        found = self.pattern.fullmatch(text) if self.full else self.pattern.search(text)
        return Verdict(
            self.kind, passed=found is not None, reason="matched" if found else "no match"
        )


@dataclass(frozen=True, slots=True)
class FieldSignal:
    """A confidence the model reported itself: `field` of a JSON answer, else the first
    `field: number` in the text. It must be a number in [0, 1] and at least `threshold`."""

    field: str
    threshold: float

    @property
    def kind(self) -> str:
        return "confidence_field"

    def __call__(self, data: Mapping[str, Any]) -> Verdict:
        text = answer_text(data)
        score = reported_confidence(text, field=self.field) if text is not None else None
        if score is None:
            return Verdict.failed(self.kind, f"no {self.field!r} in [0, 1] in the answer")
        return Verdict.scored(self.kind, score, self.threshold)


def reported_confidence(text: str, *, field: str) -> float | None:
    value: Any = None
    try:
        parsed = parse_json(_unfenced(text))
    except orjson.JSONDecodeError:
        parsed = None
    if isinstance(parsed, dict):
        value = parsed.get(field)
    else:
        found = re.search(rf'"?{re.escape(field)}"?\s*[:=]\s*(-?\d+(?:\.\d+)?)', text[-4096:])
        value = float(found.group(1)) if found else None
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    return float(value) if 0.0 <= value <= 1.0 else None


def _unfenced(text: str) -> str:
    """A JSON answer wrapped in a ```json fence, as chat models often write it, unwrapped."""
    stripped = text.strip()
    if stripped.startswith("```") and stripped.endswith("```") and len(stripped) >= 6:
        inner = stripped[3:-3]
        return inner.split("\n", 1)[1] if inner.lower().startswith("json") else inner
    return stripped


# ---- the judge ----------------------------------------------------------------------------

JUDGE_SYSTEM = (
    "You grade answers. Read the conversation and the answer that follows it. Reply with one "
    "number between 0 and 1 and nothing else: the probability that the answer is correct, "
    "complete and follows the instructions."
)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def judge_messages(
    messages: Sequence[Mapping[str, Any]], answer: str, *, max_chars: int
) -> list[dict[str, str]]:
    """The grading prompt: the conversation's text (its newest `max_chars`) and the answer."""
    conversation = conversation_text(messages, max_chars=max_chars)
    user = f"Conversation:\n{conversation}\n\nAnswer to grade:\n{answer[-max_chars:]}"
    return [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": user}]


def conversation_text(messages: Sequence[Mapping[str, Any]], *, max_chars: int) -> str:
    """The conversation as `role: text` lines, its newest `max_chars` (what a judge is shown)."""
    parts = [
        f"{message.get('role', 'user')}: {content}"
        for message in messages
        if (content := content_text(message.get("content")))
    ]
    return "\n".join(parts)[-max_chars:]


def judge_score(text: str | None) -> float | None:
    """The first number of the judge's reply if it is in [0, 1]; None otherwise (fails)."""
    if not text:
        return None
    found = _NUMBER.search(text)
    if found is None:
        return None
    value = float(found.group())
    return value if 0.0 <= value <= 1.0 else None


def judge_verdict(text: str | None, *, threshold: float) -> Verdict:
    score = judge_score(text)
    if score is None:
        return Verdict.failed("judge", "the judge gave no score in [0, 1]")
    return Verdict.scored("judge", score, threshold)


# ---- compiling the configured checks --------------------------------------------------------


def compile_check(check: Check) -> Signal | JudgeSettings:
    """A configured check as its signal (a judge stays configuration: the layer calls it)."""
    if isinstance(check, MeanLogprobSettings):
        return LogprobSignal(check.threshold)
    if isinstance(check, MinLogprobSettings):
        return LogprobSignal(check.threshold, use_min=True)
    if isinstance(check, MustParseSettings):
        return ParseSignal()
    if isinstance(check, JsonSchemaSettings):
        return ParseSignal(_validator(check.json_schema))
    if isinstance(check, RegexSettings):
        return RegexSignal(re.compile(check.pattern), full=check.full)
    if isinstance(check, ConfidenceFieldSettings):
        return FieldSignal(check.field, check.threshold)
    return check


def needs_logprobs(checks: Sequence[Check]) -> bool:
    return any(isinstance(c, MeanLogprobSettings | MinLogprobSettings) for c in checks)


def check_schema(schema: Mapping[str, Any]) -> None:
    """Raise ValueError if `schema` is not a valid JSON schema (of the draft it declares)."""
    validators = _jsonschema()
    from jsonschema.exceptions import SchemaError

    try:
        validators.validator_for(schema).check_schema(schema)
    except SchemaError as exc:
        raise ValueError(f"invalid JSON schema: {exc.message}") from None


def _validator(schema: Mapping[str, Any]) -> Any:
    validators = _jsonschema()
    return validators.validator_for(schema)(schema)


def _jsonschema() -> Any:
    try:
        from jsonschema import validators
    except ImportError:  # pragma: no cover - depends on the install
        raise ValueError(
            "the json_schema check needs jsonschema: pip install 'levergate[cascade]'"
        ) from None
    return validators
