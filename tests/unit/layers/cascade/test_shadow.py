"""Shadow samples over a scripted stack: which accepted answers are shadowed (a seeded draw), what
the strongest step is asked, how the answers are compared, the counters and the retention gauge,
the shadow's dollars in the ledger, a full queue, and workers cancelled with work pending."""

from __future__ import annotations

import asyncio
import random
from contextlib import AbstractAsyncContextManager
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from levergate.catalog import Catalog
from levergate.config import LedgerSettings, PriceSettings
from levergate.config.cascade import CascadeSettings
from levergate.core.call import Call, Context
from levergate.core.clock import SystemClock
from levergate.core.controls import Controls, Principal, Priority
from levergate.core.reply import Completed, Reply
from levergate.errors import UpstreamUnavailable
from levergate.layers.cascade.layer import Cascade
from levergate.layers.cascade.metrics import CascadeMetrics
from levergate.layers.cascade.plan import Plans
from levergate.layers.cascade.shadow import Shadows
from levergate.layers.measure.ledger import Ledger, LedgerMetrics, OwnSpend
from tests.waiting import running, until

ALIASES = ("a", "b", "judge")
# $ per million tokens; every scripted answer reports 1000 prompt and 100 completion tokens.
PRICES = {"a": PriceSettings(input=1.0, output=2.0), "b": PriceSettings(input=10.0, output=30.0),
          "judge": PriceSettings(input=2.0, output=4.0)}  # fmt: skip
B_CALL_USD = (1000 * 10.0 + 100 * 30.0) / 1e6
JUDGE_CALL_USD = (1000 * 2.0 + 100 * 4.0) / 1e6


class Scripted:
    """Answers `texts[(alias, question)]`; "a" passes the logprob check unless the question is
    marked HARD; "b" raises for questions marked DOWN; the judge says `judge_says`. `gate`, when
    set, holds every call to "b" until it is set."""

    def __init__(self, texts: dict[tuple[str, str], str], judge_says: str = "yes") -> None:
        self.texts = texts
        self.judge_says = judge_says
        self.calls: list[Call] = []
        self.gate: asyncio.Event | None = None

    async def __call__(self, call: Call) -> Reply:
        self.calls.append(call)
        alias, question = call.model, call.body["messages"][-1]["content"]
        call.ctx.trace.alias = alias
        if alias == "b" and self.gate is not None:
            await self.gate.wait()
        if alias == "b" and "DOWN" in question:
            raise UpstreamUnavailable("b is down")
        logprob = -3.0 if alias == "a" and "HARD" in question else -0.1
        content = self.judge_says if alias == "judge" else self.texts.get((alias, question), alias)
        message = {"role": "assistant", "content": content}
        logprobs = {"content": [{"token": "x", "logprob": logprob, "bytes": [120],
                                 "top_logprobs": []}], "refusal": None}  # fmt: skip
        return Completed(data={
            "id": "1", "object": "chat.completion", "created": 1, "model": alias,
            "choices": [{"index": 0, "message": message, "logprobs": logprobs,
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1000, "completion_tokens": 100, "total_tokens": 1100},
        })  # fmt: skip

    def shadowed(self) -> list[Call]:
        return [c for c in self.calls if c.ctx.request_id.startswith("shadow-")]


class Rig:
    def __init__(self, inner: Scripted, *, seed: int = 1, **cascade: Any) -> None:
        self.registry = CollectorRegistry()
        settings = CascadeSettings.model_validate(cascade)
        metrics = CascadeMetrics(self.registry)
        spend = OwnSpend(Ledger(Catalog.of_prices(PRICES)),
                         LedgerMetrics(LedgerSettings(), self.registry))  # fmt: skip
        self.shadows = Shadows(settings.shadow, metrics=metrics.shadows, clock=SystemClock(),
                               rng=random.Random(seed), spend=spend)  # fmt: skip
        plans = Plans(settings, aliases=ALIASES)
        self.cascade = Cascade(inner, plans=plans, metrics=metrics, shadows=self.shadows)

    async def ask(self, question: str, *, model: str = "cascade:a>b", n: int = 0) -> Call:
        body = {"model": model, "messages": [{"role": "user", "content": question}]}
        call = Call(
            "chat",
            body,
            Context(f"r{n}", principal=Principal(tenant="acme"), controls=Controls(feature="faq")),
        )
        await self.cascade(call)
        return call

    def value(self, name: str, **labels: str) -> float | None:
        return self.registry.get_sample_value(name, labels)

    def results(self, cascade: str = "cascade:a>b") -> dict[str, float]:
        return {r: self.value("levergate_cascade_shadow_total", cascade=cascade, result=r) or 0.0
                for r in ("agree", "disagree", "failed", "dropped")}  # fmt: skip

    def running(self) -> AbstractAsyncContextManager[None]:
        """The shadow workers, as the Supervisor would run them, cancelled on the way out."""
        return running(self.shadows.run)


async def test_sampling_follows_the_injected_random_source() -> None:
    inner = Scripted({})
    rig = Rig(inner, seed=7, shadow={"rate": 0.3, "queue": 100})
    draws = random.Random(7)
    expected = [f"shadow-r{i}" for i in range(40) if draws.random() < 0.3]
    assert 0 < len(expected) < 40
    async with rig.running():
        for i in range(40):
            await rig.ask(f"q{i}", n=i)
        await until(lambda: sum(rig.results().values()) == len(expected))
    assert [c.ctx.request_id for c in inner.shadowed()] == expected


async def test_agreement_disagreement_and_the_retention_gauge() -> None:
    texts = {("a", "q1"): "Paris", ("b", "q1"): "paris.",
             ("a", "q2"): "B", ("b", "q2"): "The answer is (B).",
             ("a", "q3"): "42", ("b", "q3"): "#### 42",
             ("a", "q4"): "Lyon", ("b", "q4"): "Paris"}  # fmt: skip
    inner = Scripted(texts)
    rig = Rig(inner, shadow={"rate": 1.0})
    assert rig.value("levergate_cascade_quality_retention", cascade="cascade:a>b") is None
    async with rig.running():
        calls = [await rig.ask(q, n=i) for i, q in enumerate(["q1", "q2", "q3", "q4"])]
        # Four escalated requests: answered by the strong model, retained, never shadowed.
        for i in range(4):
            await rig.ask(f"HARD {i}", n=10 + i)
        await until(lambda: rig.results()["agree"] + rig.results()["disagree"] == 4)
    assert rig.results() == {"agree": 3.0, "disagree": 1.0, "failed": 0.0, "dropped": 0.0}
    # 4 of 8 accepted, 1 of 4 samples disagreed: 1 - 0.5 x 0.25.
    kept = rig.value("levergate_cascade_quality_retention", cascade="cascade:a>b")
    assert kept == pytest.approx(0.875)
    # The strongest step got the client's question, whole, under a context of its own.
    shadows = inner.shadowed()
    assert [c.body["messages"][-1]["content"] for c in shadows] == ["q1", "q2", "q3", "q4"]
    assert {c.model for c in shadows} == {"b"}
    assert all("stream" not in c.body and "logprobs" not in c.body for c in shadows)
    assert all(
        c.ctx.controls.priority is Priority.BATCH and c.ctx.controls.deadline is not None
        for c in shadows
    )
    assert all(c.ctx.trace is not call.ctx.trace for c in shadows for call in calls)
    for call in calls:  # the client's record is untouched: no shadow in its cost
        assert call.ctx.trace.alias == "a"
        assert call.ctx.trace.side_spend == []


async def test_the_shadow_is_paid_for_as_kind_shadow_under_the_request_tenant() -> None:
    inner = Scripted({})
    rig = Rig(inner, shadow={"rate": 1.0})
    async with rig.running():
        for i in range(3):
            await rig.ask(f"q{i}", n=i)
        await until(lambda: sum(rig.results().values()) == 3)
    spent = rig.value("levergate_spend_usd_total", model="b", tenant="acme", feature="faq",
                      kind="shadow")  # fmt: skip
    assert spent == pytest.approx(3 * B_CALL_USD)


@pytest.mark.parametrize(
    ("says", "result"), [("Yes, equivalent.", "agree"), ("0.2", "disagree"), ("hmm", "failed")]
)
async def test_a_judge_compares_and_is_paid_for(says: str, result: str) -> None:
    inner = Scripted({("a", "q"): "Paris is the capital.", ("b", "q"): "It is Paris."},
                     judge_says=says)  # fmt: skip
    rig = Rig(inner, ad_hoc=False, cascades=[{
        "name": "qa", "steps": ["a", "b"], "checks": [{"kind": "mean_logprob"}],
        "shadow": {"rate": 1.0, "compare": "judge", "judge": "judge"},
    }])  # fmt: skip
    async with rig.running():
        await rig.ask("q", model="qa")
        await until(lambda: sum(rig.results("qa").values()) == 1)
    assert rig.results("qa")[result] == 1.0
    [judged] = [c for c in inner.calls if c.model == "judge"]
    prompt = judged.body["messages"][1]["content"]
    assert "Paris is the capital." in prompt
    assert "It is Paris." in prompt
    spent = rig.value("levergate_spend_usd_total", model="judge", tenant="acme", feature="faq",
                      kind="shadow")  # fmt: skip
    assert spent == pytest.approx(JUDGE_CALL_USD)


async def test_a_failed_strong_call_is_counted_and_measures_nothing() -> None:
    rig = Rig(Scripted({}), shadow={"rate": 1.0})
    async with rig.running():
        await rig.ask("DOWN")
        await until(lambda: rig.results()["failed"] == 1)
    assert rig.value("levergate_cascade_quality_retention", cascade="cascade:a>b") is None


async def test_a_full_queue_drops_and_counts_and_the_queued_sample_still_runs() -> None:
    inner = Scripted({})
    rig = Rig(inner, shadow={"rate": 1.0, "queue": 1})
    for i in range(3):  # no worker yet: the first waits in the queue, the others find it full
        await rig.ask(f"q{i}", n=i)
    assert rig.results()["dropped"] == 2
    async with rig.running():
        await until(lambda: rig.results()["disagree"] == 1)
    assert [c.ctx.request_id for c in inner.shadowed()] == ["shadow-r0"]


async def test_cancelling_the_workers_with_shadows_in_flight_and_queued_leaves_no_task() -> None:
    inner = Scripted({})
    inner.gate = asyncio.Event()  # the strong model never answers
    rig = Rig(inner, shadow={"rate": 1.0, "queue": 8, "concurrency": 2})
    before = asyncio.all_tasks()
    async with rig.running():
        for i in range(5):
            await rig.ask(f"q{i}", n=i)
        await until(lambda: len(inner.shadowed()) == 2)  # two in flight, three queued
    assert asyncio.all_tasks() == before
    assert sum(rig.results().values()) == 0
