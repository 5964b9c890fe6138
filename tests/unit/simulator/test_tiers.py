"""The simulator's service tiers, without sockets: answers say their tier, flex is slower and its
capacity runs out (OpenAI's 429 or Groq's 498), priority is faster, per-request latencies are
what the oracle computes, and the stats bill each tier at the simulator's own prices."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from levergate.simulator import SimSettings, Simulator, tokens
from levergate.simulator.responses import Reply
from levergate.simulator.tiers import SimTier, request_rng, request_timing
from levergate.testing import ManualClock

USER = [{"role": "user", "content": "Hello there"}]
SLOW = {"ttft_ms": 200.0, "tokens_per_second": 50.0, "jitter": 0.3, "per_request": True}


def make(**values: Any) -> Simulator:
    return Simulator(settings=SimSettings.model_validate(values), clock=ManualClock())


def ask(sim: Simulator, *, finish: bool = True, **extra: Any) -> Reply:
    body = orjson.dumps({"model": "m", "messages": USER, "max_tokens": 8, **extra})
    reply = sim.handle(method="POST", path="/v1/chat/completions",
                       headers={"authorization": "Bearer sk-t"}, body=body)  # fmt: skip
    if finish:
        sim.finish(reply)
    return reply


def tier_of(reply: Reply) -> Any:
    return orjson.loads(reply.body).get("service_tier", "absent")


def test_every_answer_says_its_tier_unless_told_not_to() -> None:
    sim = make()
    assert tier_of(ask(sim)) == "default"
    assert tier_of(ask(sim, service_tier="auto")) == "default"
    assert tier_of(ask(sim, service_tier="flex")) == "flex"
    assert tier_of(ask(sim, service_tier="priority")) == "priority"
    streamed = ask(sim, service_tier="flex", stream=True)
    assert streamed.events is not None
    chunks = [orjson.loads(e.removeprefix(b"data: ")) for e in streamed.events[:-1]]
    assert {c["service_tier"] for c in chunks} == {"flex"}
    silent = make(tiers={"report": False})
    assert tier_of(ask(silent, service_tier="flex")) == "absent"


def test_unknown_and_unsold_tiers_are_400s() -> None:
    sim = make(tiers={"flex": {"models": ["other"]}})
    assert ask(sim, service_tier="turbo").status == 400
    refused = ask(sim, service_tier="flex")
    assert refused.status == 400
    assert orjson.loads(refused.body)["error"]["param"] == "service_tier"


@pytest.mark.parametrize(
    ("style", "status", "code"),
    [("openai", 429, "resource_unavailable"), ("groq", 498, "capacity_exceeded")],
)
def test_flex_capacity_runs_out_and_comes_back(style: str, status: int, code: str) -> None:
    sim = make(tiers={"flex": {"max_concurrency": 1, "refusal": style}})
    held = ask(sim, finish=False, service_tier="flex")
    assert held.status == 200
    refused = ask(sim, service_tier="flex")
    assert refused.status == status
    assert orjson.loads(refused.body)["error"]["code"] == code
    assert dict(refused.headers)["retry-after"] == "1"
    assert ask(sim).status == 200  # default capacity is another matter
    sim.finish(held)
    assert ask(sim, service_tier="flex").status == 200
    stats = sim.snapshot()["tiers"]
    assert (stats["flex"]["requests"], stats["flex"]["refused"]) == (2, 1)


def test_a_seeded_share_of_flex_is_refused() -> None:
    sim = make(seed=3, tiers={"flex": {"refusal_rate": 0.5}})
    statuses = [ask(sim, service_tier="flex").status for _ in range(200)]
    assert 60 < statuses.count(429) < 140
    again = make(seed=3, tiers={"flex": {"refusal_rate": 0.5}})
    assert [ask(again, service_tier="flex").status for _ in range(200)] == statuses


def test_flex_is_slower_and_priority_faster_than_default() -> None:
    sim = make(latency=SLOW, tiers={"flex": {"slowdown": 3, "queue_ms": 5000},
                                    "priority": {"speedup": 2}})  # fmt: skip
    default, flex, fast = (ask(sim, service_tier=t).delay for t in ("default", "flex", "priority"))
    assert fast < default < flex
    assert flex > 5.0


def test_a_per_request_latency_is_what_the_oracle_computes_whatever_ran_before() -> None:
    values = {
        "seed": 9,
        "latency": SLOW,
        "tiers": {"flex": {"slowdown": 2, "queue_ms": 3000, "queue_spread": 1.0}},
    }
    sim = make(**values)
    for _ in range(5):
        ask(sim, service_tier="priority")  # other traffic first
    reply = ask(sim, service_tier="flex")
    settings = SimSettings.model_validate(values)
    prompt = tokens.chat_prompt({"messages": USER})  # the prompt as the simulator renders it
    timing = request_timing(
        latency=settings.latency,
        tiers=settings.tiers,
        tier=SimTier.FLEX,
        uncached_tokens=tokens.count_tokens(prompt),
        output_tokens=8,
        rng=request_rng(9, model="m", tier=SimTier.FLEX, prompt=prompt),
    )
    assert reply.delay == pytest.approx(timing.total)


def test_the_stats_bill_each_tier_at_the_simulators_own_prices() -> None:
    prices = {"m": {"default": {"input": 2.0, "output": 8.0},
                    "flex": {"input": 1.0, "output": 4.0}}}  # fmt: skip
    sim = make(tiers={"prices": prices})
    usage = orjson.loads(ask(sim).body)["usage"]
    ask(sim, service_tier="flex")
    ask(sim, service_tier="priority")  # no price listed: $0
    stats = sim.snapshot()["tiers"]
    standard = (usage["prompt_tokens"] * 2.0 + 8 * 8.0) / 1e6
    assert stats["default"]["usd"] == pytest.approx(standard)
    assert stats["flex"]["usd"] == pytest.approx(standard / 2)
    assert (stats["priority"]["requests"], stats["priority"]["usd"]) == (1, 0.0)
