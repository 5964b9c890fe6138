"""The Cascade layer over a scripted stack: which steps are called, what is returned, what is
recorded. Hypothesis draws every step's outcome (its answer passes, fails, or the call errors)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from levergate.config.cascade import CascadeSettings
from levergate.core.call import Call, Context, Kind
from levergate.core.reply import Completed, Reply, Stream
from levergate.errors import BadRequest, UpstreamUnavailable
from levergate.layers.cascade.layer import Cascade
from levergate.layers.cascade.metrics import CascadeMetrics
from levergate.layers.cascade.plan import Plans

ALIASES = ("a", "b", "c", "d", "judge")
GOOD, BAD = -0.1, -3.0


class Scripted:
    """Answers each alias as scripted: "pass" (high logprobs), "fail" (low), "error" (502); the
    judge answers with `judge_says`. Records the aliases called, in order."""

    def __init__(self, outcomes: dict[str, str], judge_says: str = "0.9") -> None:
        self.outcomes = outcomes
        self.judge_says = judge_says
        self.called: list[str] = []
        self.bodies: list[dict[str, Any]] = []

    async def __call__(self, call: Call) -> Reply:
        alias = call.model
        self.called.append(alias)
        self.bodies.append(dict(call.body))
        call.ctx.trace.alias = alias
        outcome = "judge" if alias == "judge" else self.outcomes[alias]
        if outcome == "error":
            raise UpstreamUnavailable(f"{alias} is down")
        value = GOOD if outcome == "pass" else BAD
        content = self.judge_says if outcome == "judge" else f"answer from {alias}"
        logprobs = {"content": [{"token": "x", "logprob": value, "bytes": [120],
                                 "top_logprobs": []}] * 3, "refusal": None}  # fmt: skip
        message = {"role": "assistant", "content": content}
        return Completed(data={
            "id": "1", "object": "chat.completion", "created": 1, "model": alias,
            "choices": [{"index": 0, "message": message, "logprobs": logprobs,
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13},
        })  # fmt: skip


def layer(inner: Scripted, **settings: Any) -> Cascade:
    plans = Plans(CascadeSettings.model_validate(settings), aliases=ALIASES)
    return Cascade(inner, plans=plans, metrics=CascadeMetrics(CollectorRegistry()))


def chat(model: str, kind: Kind = "chat", **body: Any) -> Call:
    return Call(kind=kind, body={"model": model, "messages": [{"role": "user", "content": "q"}],
                                 **body}, ctx=Context(request_id="r"))  # fmt: skip


steps_and_outcomes = st.integers(min_value=2, max_value=4).flatmap(
    lambda n: st.tuples(
        st.just(ALIASES[:n]),
        st.lists(st.sampled_from(["pass", "fail", "error"]), min_size=n, max_size=n),
    )
)


@given(steps_and_outcomes)
def test_invariants(drawn: tuple[tuple[str, ...], list[str]]) -> None:
    steps, outcomes = drawn
    inner = Scripted(dict(zip(steps, outcomes, strict=True)))
    call = chat("cascade:" + ">".join(steps))
    try:
        reply = asyncio.run(layer(inner)(call))
    except UpstreamUnavailable:
        # Only when no step gave an answer at all.
        assert all(o == "error" for o in outcomes)
        assert inner.called == list(steps)
        return
    assert isinstance(reply, Completed)
    answered = reply.data["model"]
    trace = call.ctx.trace
    # Steps are called in order, each at most once, never past the last.
    assert inner.called == list(steps[: len(inner.called)])
    assert answered in inner.called
    assert trace.escalations == len(inner.called) - 1
    assert trace.route is not None
    assert (trace.route.chosen, trace.route.default) == (answered, steps[-1])
    assert trace.alias == answered
    first_pass = next((s for s, o in zip(steps[:-1], outcomes, strict=False) if o == "pass"), None)
    if first_pass is not None:
        assert answered == first_pass
        assert reply.headers["x-levergate-cascade"] == "accepted"
    elif outcomes[-1] != "error":
        assert answered == steps[-1]
    else:  # the last step failed: the newest earlier answer, marked
        assert reply.headers["x-levergate-cascade"] == "fallback-to-cheap"
        assert trace.cascade_fallback
        assert answered == [s for s, o in zip(steps, outcomes, strict=True) if o != "error"][-1]
    paid = [s for s in inner.called if inner.outcomes[s] != "error" and s != answered]
    assert [s.alias for s in trace.side_spend] == paid
    assert all(s.purpose == "cascade" and s.output == 3 for s in trace.side_spend)


async def test_logprobs_are_asked_for_and_stripped_only_if_the_client_did_not_ask() -> None:
    inner = Scripted({"a": "pass", "b": "pass"})
    reply = await layer(inner)(chat("cascade:a>b"))
    assert inner.bodies[0]["logprobs"] is True
    assert isinstance(reply, Completed)
    assert reply.data["choices"][0]["logprobs"] is None
    kept = await layer(inner)(chat("cascade:a>b", logprobs=True))
    assert isinstance(kept, Completed)
    assert kept.data["choices"][0]["logprobs"] is not None
    plain = await layer(inner, checks=[{"kind": "regex", "pattern": "answer"}])(chat("cascade:a>b"))
    assert "logprobs" not in inner.bodies[-1]
    assert isinstance(plain, Completed)


async def test_an_accepted_cheap_answer_is_replayed_to_a_streaming_client() -> None:
    inner = Scripted({"a": "pass", "b": "pass"})
    reply = await layer(inner)(chat("cascade:a>b", stream=True))
    assert isinstance(reply, Stream)
    assert "stream" not in inner.bodies[0]
    events = [e.json() async for e in reply]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in events if c["choices"])
    assert text == "answer from a"
    assert events[-1]["usage"]["completion_tokens"] == 3


@pytest.mark.parametrize(("says", "chosen"), [("0.9", "a"), ("0.2", "b"), ("no idea", "b")])
async def test_a_judge_call_decides(says: str, chosen: str) -> None:
    inner = Scripted({"a": "pass", "b": "pass"}, judge_says=says)
    cascade = layer(inner, ad_hoc=False, cascades=[
        {"name": "judged", "steps": ["a", "b"], "checks": [{"kind": "judge", "alias": "judge"}]}
    ])  # fmt: skip
    call = chat("judged")
    reply = await cascade(call)
    assert isinstance(reply, Completed)
    assert reply.data["model"] == chosen
    assert inner.called[:2] == ["a", "judge"]
    assert "answer from a" in inner.bodies[1]["messages"][1]["content"]
    purposes = [(s.alias, s.purpose) for s in call.ctx.trace.side_spend]
    assert ("judge", "judge") in purposes
    assert call.ctx.trace.alias == chosen  # the judge's call did not become "what answered"


async def test_other_models_pass_through_and_bad_requests_are_refused() -> None:
    inner = Scripted({"a": "pass", "b": "pass"})
    reply = await layer(inner)(chat("a"))
    assert isinstance(reply, Completed)
    assert inner.called == ["a"]
    assert "logprobs" not in inner.bodies[-1]  # passed through untouched
    with pytest.raises(BadRequest, match="chat completions only"):
        await layer(inner)(chat("cascade:a>b", kind="completion"))
    with pytest.raises(BadRequest, match="'n' must be 1"):
        await layer(inner)(chat("cascade:a>b", n=2))
    only_named = layer(inner, ad_hoc=False, cascades=[
        {"name": "x", "steps": ["a", "b"], "checks": [{"kind": "json"}]}
    ])  # fmt: skip
    with pytest.raises(BadRequest, match="turned off"):
        await only_named(chat("cascade:a>b"))
