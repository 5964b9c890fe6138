"""A route's shadow samples over a scripted stack, built as the pipeline builds it (`Route.layer`
from `Settings` and `Shared`): which answers are offered (only from an alias other than the
default, replaying the seeded draws), streamed answers skipped and counted, the client's reply
and record untouched, what the default is asked, the comparison, the retention gauge, the spend,
a full queue, and the start-up errors of `routing.shadow`."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Any

import orjson
import pytest
from prometheus_client import CollectorRegistry

from levergate.config import LedgerSettings, Settings
from levergate.core.call import Call, Context, RouteDecision
from levergate.core.clock import SystemClock
from levergate.core.controls import Controls, Principal, Priority
from levergate.core.reply import Completed, Event, EventSource, Reply, Stream
from levergate.core.service import Service
from levergate.errors import ConfigError
from levergate.layers.measure.ledger import LedgerMetrics
from levergate.layers.route import Route
from levergate.layers.shared import Seeds, Shared
from tests.waiting import running, until

SEED = 11
# $ per million tokens; every scripted answer reports 1000 prompt and 100 completion tokens.
PRICES = {"mini": {"input": 1.0, "output": 2.0}, "big": {"input": 10.0, "output": 30.0},
          "judge": {"input": 2.0, "output": 4.0}}  # fmt: skip
BIG_CALL_USD = (1000 * 10.0 + 100 * 30.0) / 1e6
JUDGE_CALL_USD = (1000 * 2.0 + 100 * 4.0) / 1e6
MODELS = [{"name": n, "upstream": "up", "price": p} for n, p in PRICES.items()]
# "faq" requests go to the cheap alias, everything else to the default.
RULES = [{"name": "faq", "to": "mini", "when": {"feature": ["faq"]}}]
ACME, FAQ = Principal(tenant="acme"), Controls(feature="faq")


class Scripted:
    """Answers `texts[(alias, question)]` (else the alias's name), as a stream when asked for
    one; a question marked TOOL gets a tool call (no text), one marked FELL is answered by "big"
    (a fallback); the judge says `judge_says`."""

    def __init__(
        self, texts: dict[tuple[str, str], str] | None = None, judge_says: str = "yes"
    ) -> None:
        self.texts = texts or {}
        self.judge_says = judge_says
        self.calls: list[Call] = []
        self.replies: list[Reply] = []

    async def __call__(self, call: Call) -> Reply:
        self.calls.append(call)
        alias, question = call.model, call.body["messages"][-1]["content"]
        if "FELL" in question:  # the alias failed, and its fallback (the default) answered
            alias = "big"
        call.ctx.trace.alias = alias  # as Dispatch records it
        content = self.judge_says if alias == "judge" else self.texts.get((alias, question), alias)
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if "TOOL" in question:
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "t", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ],
            }
        reply: Reply
        if call.stream:
            reply = Stream(_events(content))
        else:
            reply = Completed(orjson.dumps({
                "id": "1", "object": "chat.completion", "created": 1, "model": alias,
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 1000, "completion_tokens": 100, "total_tokens": 1100},
            }))  # fmt: skip
        self.replies.append(reply)
        return reply

    def shadowed(self) -> list[Call]:
        return [c for c in self.calls if c.ctx.request_id.startswith("shadow-")]


async def _events(text: str) -> EventSource:
    for word in text.split():
        yield Event.of({"choices": [{"index": 0, "delta": {"content": word}}]})


class Rig:
    def __init__(self, inner: Scripted, **routing: Any) -> None:
        routing.setdefault("routes", [{"name": "auto", "default": "big", "rules": RULES}])
        settings = Settings.load(upstreams=[{"name": "up", "base_url": "http://127.0.0.1:9"}],
                                 models=MODELS, routing=routing,
                                 traffic={"seed": SEED})  # fmt: skip
        self.registry = CollectorRegistry()
        models = {m.name: m for m in settings.models}
        ledger = LedgerMetrics(LedgerSettings(), self.registry)
        self.shared = Shared.build(settings, models=models, clock=SystemClock(),
                                   registry=self.registry, ledger=ledger)  # fmt: skip
        layer = Route.layer(settings.routing, models=models, shared=self.shared)
        assert layer is not None
        self.route: Service = layer(inner)

    async def ask(self, question: str, *, feature: str = "faq", i: int = 0, **body: Any) -> Call:
        payload = {"model": "auto", "messages": [{"role": "user", "content": question}], **body}
        call = Call(
            "chat",
            payload,
            Context(
                f"r{i}", principal=Principal(tenant="acme"), controls=Controls(feature=feature)
            ),
        )
        await self.route(call)
        return call

    def value(self, name: str, **labels: str) -> float | None:
        return self.registry.get_sample_value(name, labels)

    def results(self, route: str = "auto") -> dict[str, float]:
        return {r: self.value("levergate_route_shadow_total", route=route, result=r) or 0.0
                for r in ("agree", "disagree", "failed", "dropped", "streamed")}  # fmt: skip

    def retention(self, route: str = "auto") -> float | None:
        return self.value("levergate_route_quality_retention", route=route)

    def running(self) -> AbstractAsyncContextManager[None]:
        """The route's shadow job, as the Supervisor would run it, cancelled on the way out."""
        [job] = self.shared.jobs
        assert job.name == "route_shadow"
        return running(job.run)


async def test_only_other_aliases_draw_and_the_draws_replay_streamed_ones_counted() -> None:
    inner = Scripted()
    rig = Rig(inner, shadow={"rate": 0.4, "queue": 100})
    # The route's queue draws from the pipeline's first random source (it is the only user).
    draws = Seeds(SEED).rng()
    expected, streamed = [], 0
    async with rig.running():
        for i in range(60):
            cheap, stream = i % 3 != 0, i % 5 == 0  # every third goes to the default
            await rig.ask(f"q{i}", feature="faq" if cheap else "", i=i, stream=stream)
            if cheap and draws.random() < 0.4:
                if stream:
                    streamed += 1
                else:
                    expected.append(f"shadow-r{i}")
        await until(lambda: sum(rig.results().values()) == len(expected) + streamed)
    assert len(expected) > 0
    assert streamed > 0
    assert [c.ctx.request_id for c in inner.shadowed()] == expected
    assert rig.results()["streamed"] == streamed


async def test_agreement_retention_and_the_client_reply_and_record_untouched() -> None:
    texts = {("mini", "q1"): "Paris", ("big", "q1"): "paris.",
             ("mini", "q2"): "B", ("big", "q2"): "The answer is (B).",
             ("mini", "q3"): "42", ("big", "q3"): "#### 42",
             ("mini", "q4"): "Lyon", ("big", "q4"): "Paris"}  # fmt: skip
    inner = Scripted(texts)
    rig = Rig(inner, shadow={"rate": 1.0})
    assert rig.retention() is None
    async with rig.running():
        calls = []
        for i, question in enumerate(["q1", "q2", "q3", "q4"]):
            before = len(inner.replies)
            call = Call("chat", {"model": "auto", "messages": [{"role": "user",
                                                                 "content": question}]},
                        Context(f"r{i}", principal=ACME, controls=FAQ))  # fmt: skip
            reply = await rig.route(call)
            assert reply is inner.replies[before]  # the very reply, its bytes as they came
            assert isinstance(reply, Completed)
            assert (
                orjson.loads(reply.raw)["choices"][0]["message"]["content"]
                == texts[("mini", question)]
            )
            calls.append(call)
        for i in range(4):  # answered by the default: retained, never shadowed
            await rig.ask(f"d{i}", feature="", i=10 + i)
        await until(lambda: rig.results()["agree"] + rig.results()["disagree"] == 4)
    assert rig.results() == {"agree": 3.0, "disagree": 1.0, "failed": 0.0, "dropped": 0.0,
                             "streamed": 0.0}  # fmt: skip
    # 4 of 8 answered by the cheap alias, 1 of 4 samples disagreed: 1 - 0.5 x 0.25.
    assert rig.retention() == pytest.approx(0.875)
    shadows = inner.shadowed()
    assert [c.body["messages"][-1]["content"] for c in shadows] == ["q1", "q2", "q3", "q4"]
    assert {c.model for c in shadows} == {"big"}
    assert all(
        c.ctx.controls.priority is Priority.BATCH and c.ctx.controls.deadline is not None
        for c in shadows
    )
    assert all(
        c.ctx.principal.tenant == "acme" and c.ctx.controls.feature == "faq" for c in shadows
    )
    for call in calls:  # the client's record is the route's decision, and nothing of the shadow
        assert call.ctx.trace.route == RouteDecision(
            router="rules", asked="auto", chosen="mini", default="big", reason="faq"
        )
        assert call.ctx.trace.side_spend == []
        assert all(c.ctx.trace is not call.ctx.trace for c in shadows)
    # The shadow was paid for, as kind=shadow under the request's tenant and feature.
    spent = rig.value("levergate_spend_usd_total", model="big", tenant="acme", feature="faq",
                      kind="shadow")  # fmt: skip
    assert spent == pytest.approx(4 * BIG_CALL_USD)


async def test_the_shadow_call_is_the_clients_body_whole_for_one_choice() -> None:
    inner = Scripted()
    rig = Rig(inner, shadow={"rate": 1.0})
    async with rig.running():
        await rig.ask("q", i=0, temperature=0.3, stream_options={"include_usage": True})
        await rig.ask("q", i=1, n=2)
        await until(lambda: rig.results()["disagree"] == 2)
    first, second = inner.shadowed()
    assert first.body["temperature"] == 0.3
    assert "n" not in second.body
    assert "stream" not in first.body
    assert "stream_options" not in first.body


async def test_a_route_of_its_own_judges_and_the_judge_is_paid_for() -> None:
    inner = Scripted({("mini", "q"): "Paris is the capital.", ("big", "q"): "It is Paris."},
                     judge_says="0.9")  # fmt: skip
    routes = [{"name": "auto", "default": "big", "rules": RULES,
               "shadow": {"rate": 1.0, "compare": "judge", "judge": "judge"}},
              {"name": "quiet", "default": "big", "rules": RULES}]  # fmt: skip
    rig = Rig(inner, routes=routes)  # routing.shadow's rate stays 0: `quiet` never samples
    async with rig.running():
        await rig.ask("q")
        call = Call("chat", {"model": "quiet", "messages": [{"role": "user", "content": "q"}]},
                    Context("r9", principal=ACME, controls=FAQ))  # fmt: skip
        await rig.route(call)
        await until(lambda: rig.results()["agree"] == 1)
    [judged] = [c for c in inner.calls if c.model == "judge"]
    prompt = judged.body["messages"][1]["content"]
    assert "Paris is the capital." in prompt
    assert "It is Paris." in prompt
    assert [c.ctx.request_id for c in inner.shadowed() if c.model == "big"] == ["shadow-r0"]
    assert sum(rig.results("quiet").values()) == 0
    spent = rig.value("levergate_spend_usd_total", model="judge", tenant="acme", feature="faq",
                      kind="shadow")  # fmt: skip
    assert spent == pytest.approx(JUDGE_CALL_USD)


async def test_tool_calls_and_legacy_completions_are_not_compared() -> None:
    inner = Scripted()
    rig = Rig(inner, shadow={"rate": 1.0})
    async with rig.running():
        await rig.ask("TOOL please")
        completion = Call("completion", {"model": "auto", "prompt": "hi",
                                         "messages": [{"role": "user", "content": "hi"}]},
                          Context("r1", controls=Controls(feature="faq")))  # fmt: skip
        await rig.route(completion)
        await rig.ask("q", i=2)
        await until(lambda: rig.results()["disagree"] == 1)
    assert [c.ctx.request_id for c in inner.shadowed()] == ["shadow-r2"]


async def test_a_full_queue_drops_and_counts() -> None:
    inner = Scripted()
    rig = Rig(inner, shadow={"rate": 1.0, "queue": 1})
    for i in range(3):  # no worker yet: the first waits in the queue, the others find it full
        await rig.ask(f"q{i}", i=i)
    assert rig.results()["dropped"] == 2
    async with rig.running():
        await until(lambda: rig.results()["disagree"] == 1)
    assert [c.ctx.request_id for c in inner.shadowed()] == ["shadow-r0"]


def test_without_a_rate_there_is_no_queue_and_no_series() -> None:
    rig = Rig(Scripted())
    assert rig.shared.jobs == []
    assert rig.value("levergate_route_shadow_total", route="auto", result="agree") is None


@pytest.mark.parametrize(
    ("routing", "message"),
    [
        ({"shadow": {"rate": 1.5}}, r"routing\.shadow\.rate"),
        ({"shadow": {"queue": 0}}, r"routing\.shadow\.queue"),
        ({"shadow": {"compare": "judge"}}, "needs shadow.judge"),
        ({"shadow": {"judge": "big"}}, "only asked with shadow.compare 'judge'"),
        ({"shadow": {"compare": "judge", "judge": "ghost"}},
         "routing.shadow.judge names unknown model 'ghost'"),
        ({"routes": [{"name": "auto", "default": "big",
                      "shadow": {"rate": 1, "compare": "judge", "judge": "ghost"}}]},
         "routing route 'auto': shadow.judge names unknown model 'ghost'"),
        # The queue is the routes' one: a route sets only how it is sampled.
        ({"routes": [{"name": "auto", "default": "big", "shadow": {"queue": 5}}]},
         r"routing\.routes\.0\.shadow\.queue"),
    ],
)  # fmt: skip
def test_bad_shadow_settings_are_start_up_errors_naming_the_field(
    routing: dict[str, Any], message: str
) -> None:
    routing.setdefault("routes", [{"name": "auto", "default": "big"}])
    with pytest.raises(ConfigError, match=message):
        Settings.load(upstreams=[{"name": "up", "base_url": "http://127.0.0.1:9"}],
                      models=MODELS, routing=routing)  # fmt: skip


async def test_a_sampled_streamed_answer_passes_through_as_it_came_and_is_counted() -> None:
    inner = Scripted({("mini", "q"): "one two three"})
    rig = Rig(inner, shadow={"rate": 1.0})
    call = Call("chat", {"model": "auto", "stream": True,
                         "messages": [{"role": "user", "content": "q"}]},
                Context("r0", controls=Controls(feature="faq")))  # fmt: skip
    reply = await rig.route(call)
    assert reply is inner.replies[0]
    assert isinstance(reply, Stream)
    words = [e.json()["choices"][0]["delta"]["content"] async for e in reply]
    assert words == ["one", "two", "three"]
    assert rig.results()["streamed"] == 1
    assert inner.shadowed() == []
    # A streamed answer still counts as answered by the cheap alias: with nothing compared,
    # nothing is measured.
    assert rig.retention() is None


async def test_an_answer_from_the_default_by_fallback_is_retained_not_shadowed() -> None:
    inner = Scripted()
    rig = Rig(inner, shadow={"rate": 1.0})
    async with rig.running():
        fell = await rig.ask("FELL over", i=0)
        await rig.ask("q", i=1)
        await until(lambda: rig.results()["disagree"] == 1)
    assert fell.ctx.trace.route is not None
    assert fell.ctx.trace.route.chosen == "mini"
    assert [c.ctx.request_id for c in inner.shadowed()] == ["shadow-r1"]
    # 1 of 2 answered by the cheap alias, its one sample disagreed: 1 - 0.5 x 1.
    assert rig.retention() == pytest.approx(0.5)
