"""The simulator's logprobs (OpenAI's chat wire shape, whole and streamed) and hard prompts."""

from __future__ import annotations

import math
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from levergate.simulator import SimSettings, Simulator
from levergate.simulator.hardness import token_logprobs

HARD = {"marker": "HARD", "strong_models": ["big"], "json_answers": True}


def post(sim: Simulator, **body: Any) -> Any:
    body.setdefault("model", "small")
    body.setdefault("messages", [{"role": "user", "content": "q"}])
    reply = sim.handle(method="POST", path="/v1/chat/completions", headers={},
                       body=orjson.dumps(body))  # fmt: skip
    if reply.events is not None:
        return reply.status, [orjson.loads(e[6:]) for e in reply.events if e != b"data: [DONE]\n\n"]
    return reply.status, orjson.loads(reply.body)


def test_logprobs_only_when_asked_in_openais_shape() -> None:
    sim = Simulator()
    _, plain = post(sim)
    assert plain["choices"][0]["logprobs"] is None
    status, data = post(sim, logprobs=True, top_logprobs=3, max_tokens=5)
    assert status == 200
    parsed = ChatCompletion.model_validate(data)  # the SDK's own type accepts it
    content = parsed.choices[0].logprobs.content  # type: ignore[union-attr]
    assert content is not None
    assert "".join(t.token for t in content) == parsed.choices[0].message.content
    assert all(len(t.top_logprobs) == 3 and t.top_logprobs[0].token == t.token for t in content)
    assert all(t.bytes == list(t.token.encode()) for t in content)


def test_streamed_chunks_carry_one_entry_each() -> None:
    _, chunks = post(Simulator(), logprobs=True, max_tokens=4, stream=True)
    entries = []
    for raw in chunks:
        chunk = ChatCompletionChunk.model_validate(raw)
        lp = chunk.choices[0].logprobs
        if chunk.choices[0].delta.content:
            assert lp is not None
            assert lp.content is not None
            assert len(lp.content) == 1
            entries.append(lp.content[0].token)
    assert len(entries) == 4


@pytest.mark.parametrize(("body", "param"), [
    ({"logprobs": "yes"}, "logprobs"), ({"top_logprobs": 2}, "top_logprobs"),
    ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
])  # fmt: skip
def test_bad_logprob_parameters_are_a_400(body: dict[str, Any], param: str) -> None:
    status, data = post(Simulator(), **body)
    assert status == 400
    assert data["error"]["param"] == param


def test_hard_prompts_get_low_logprobs_and_cut_json() -> None:
    sim = Simulator(settings=SimSettings.model_validate({"hard": HARD}))
    easy_msgs = [{"role": "user", "content": "easy"}]
    hard_msgs = [{"role": "user", "content": "a HARD one"}]
    _, easy = post(sim, messages=easy_msgs, logprobs=True)
    _, hard = post(sim, messages=hard_msgs, logprobs=True)
    _, strong = post(sim, model="big", messages=hard_msgs, logprobs=True)

    def mean(data: dict[str, Any]) -> float:
        values = [float(e["logprob"]) for e in data["choices"][0]["logprobs"]["content"]]
        return sum(values) / len(values)

    assert mean(easy) == pytest.approx(-0.1, abs=1e-3)
    assert mean(hard) == pytest.approx(-2.0, abs=1e-3)
    assert mean(strong) == pytest.approx(-0.1, abs=1e-3)
    assert orjson.loads(easy["choices"][0]["message"]["content"])["confidence"] == 0.9
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(hard["choices"][0]["message"]["content"])
    assert easy["usage"]["completion_tokens"] == 16  # the wrapping costs no extra tokens


def test_a_seeded_share_of_prompts_is_hard() -> None:
    sim = Simulator(settings=SimSettings.model_validate({"hard": {"share": 0.3}}))
    hard = 0
    for i in range(400):
        _, data = post(sim, messages=[{"role": "user", "content": f"question {i}"}], logprobs=True)
        first = data["choices"][0]["logprobs"]["content"]
        hard += sum(e["logprob"] for e in first) / len(first) < -1
    assert 80 < hard < 160  # ~30% of 400, drawn by prompt hash
    _, again = post(sim, messages=[{"role": "user", "content": "question 7"}], logprobs=True)
    _, once_more = post(sim, messages=[{"role": "user", "content": "question 7"}], logprobs=True)
    assert again["choices"][0]["logprobs"] == once_more["choices"][0]["logprobs"]


@given(st.integers(min_value=1, max_value=300), st.floats(min_value=-10, max_value=-0.01),
       st.integers(min_value=0, max_value=10))  # fmt: skip
def test_token_logprobs_average_the_mean(count: int, mean: float, salt: int) -> None:
    values = token_logprobs(count, mean=mean, salt=salt)
    assert len(values) == count
    assert all(v <= 0 for v in values)
    assert math.fsum(values) / count == pytest.approx(mean, abs=1e-3 + abs(mean) * 1e-3)
