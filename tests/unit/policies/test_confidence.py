"""Each confidence signal on hand-made answers: what passes, what fails, and failing closed."""

from __future__ import annotations

import math
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from levergate.config.cascade import (
    ConfidenceFieldSettings,
    JsonSchemaSettings,
    MeanLogprobSettings,
    MinLogprobSettings,
    RegexSettings,
)
from levergate.policies.confidence import (
    FieldSignal,
    LogprobSignal,
    ParseSignal,
    RegexSignal,
    compile_check,
    judge_messages,
    judge_score,
    judge_verdict,
    needs_logprobs,
    reported_confidence,
)


def answer(content: str | None, logprobs: list[float] | None = None) -> dict[str, Any]:
    lp = None
    if logprobs is not None:
        lp = {"content": [{"token": "t", "logprob": v, "bytes": [116], "top_logprobs": []}
                          for v in logprobs], "refusal": None}  # fmt: skip
    message = {"role": "assistant", "content": content}
    return {"choices": [{"index": 0, "message": message, "logprobs": lp, "finish_reason": "stop"}]}


def test_mean_and_min_logprob() -> None:
    data = answer("a b c", [-0.1, -0.2, -3.0])
    mean = LogprobSignal(-1.5)(data)
    assert mean.passed
    assert mean.score == pytest.approx(-1.1)
    assert not LogprobSignal(-1.0)(data).passed
    least = LogprobSignal(-2.0, use_min=True)(data)
    assert not least.passed
    assert least.score == -3.0
    assert (least.signal, mean.signal) == ("min_logprob", "mean_logprob")


@pytest.mark.parametrize(
    "data",
    [answer("text"), answer("text", []), answer(None), {"choices": []}, {},
     answer("x", [float("nan")])],
)  # fmt: skip
def test_a_logprob_check_without_logprobs_fails(data: dict[str, Any]) -> None:
    verdict = LogprobSignal(-100.0)(data)
    assert not verdict.passed
    assert verdict.score is None


@given(st.lists(st.floats(min_value=-50, max_value=0), min_size=1, max_size=50),
       st.floats(min_value=-50, max_value=0))  # fmt: skip
def test_logprob_verdicts_agree_with_the_arithmetic(values: list[float], threshold: float) -> None:
    data = answer("x", values)
    assert LogprobSignal(threshold)(data).passed == (math.fsum(values) / len(values) >= threshold)
    assert LogprobSignal(threshold, use_min=True)(data).passed == (min(values) >= threshold)


def test_must_parse_and_schema() -> None:
    schema = compile_check(
        JsonSchemaSettings.model_validate({"schema": {"type": "object", "required": ["a"]}})
    )
    assert ParseSignal()(answer('{"a": 1}')).passed
    assert ParseSignal()(answer('```json\n{"a": 1}\n```')).passed
    assert not ParseSignal()(answer('{"a": 1')).passed
    assert not ParseSignal()(answer(None)).passed
    assert callable(schema)
    assert schema(answer('{"a": 1}')).passed
    failed = schema(answer('{"b": 1}'))
    assert not failed.passed
    assert "'a' is a required property" in failed.reason


def test_a_broken_schema_is_refused_at_start_up() -> None:
    with pytest.raises(ValueError, match="invalid JSON schema"):
        JsonSchemaSettings.model_validate({"schema": {"type": "no-such-type"}})


def test_regex() -> None:
    assert RegexSignal(re.compile(r"\d+"))(answer("answer: 42")).passed
    assert not RegexSignal(re.compile(r"\d+"), full=True)(answer("answer: 42")).passed
    assert not RegexSignal(re.compile(r"x"))(answer(None)).passed
    with pytest.raises(ValueError, match="invalid regex"):
        RegexSettings(pattern="(")


def test_self_reported_confidence() -> None:
    signal = FieldSignal("confidence", 0.7)
    assert signal(answer('{"answer": "x", "confidence": 0.9}')).passed
    assert not signal(answer('{"answer": "x", "confidence": 0.2}')).passed
    assert signal(answer("The answer is x.\nconfidence: 0.8")).passed
    assert not signal(answer('{"answer": "x"}')).passed
    assert not signal(answer('{"confidence": 7}')).passed  # out of [0, 1]: fails closed
    assert not signal(answer('{"confidence": true}')).passed
    assert reported_confidence('{"answer": "x", "confidence": 0.3', field="confidence") == 0.3


def test_judge_score_and_prompt() -> None:
    assert judge_score("0.85") == 0.85
    assert judge_score("Score: 1") == 1.0
    assert judge_score("7") is None
    assert judge_score("no idea") is None
    assert judge_score(None) is None
    assert judge_verdict("0.9", threshold=0.7).passed
    assert not judge_verdict("0.5", threshold=0.7).passed
    messages = judge_messages(
        [{"role": "user", "content": "Q?"},
         {"role": "user", "content": [{"type": "text", "text": "more"}]}],
        "A.", max_chars=1000,
    )  # fmt: skip
    assert messages[0]["role"] == "system"
    assert "user: Q?\nuser: more" in messages[1]["content"]
    assert messages[1]["content"].endswith("Answer to grade:\nA.")
    long = judge_messages([{"role": "user", "content": "x" * 5000}], "a", max_chars=300)
    assert len(long[1]["content"]) < 400


def test_which_checks_need_logprobs() -> None:
    assert needs_logprobs([MeanLogprobSettings()])
    assert needs_logprobs([ConfidenceFieldSettings(), MinLogprobSettings()])
    assert not needs_logprobs([ConfidenceFieldSettings(), RegexSettings(pattern="x")])
