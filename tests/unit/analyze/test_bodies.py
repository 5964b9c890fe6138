"""The levers that need bodies, replayed through the gateway's own layers: the semantic cache in
virtual time, a learned route, trimming and a cascade's checks; their measured quality caveats;
and a body-less input reported not evaluable."""

from __future__ import annotations

import asyncio
import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from levergate.analyze.analysis import analyse
from levergate.analyze.bodies import Embedders
from levergate.analyze.calls import Primed, Queued
from levergate.analyze.cascade import replay_cascades
from levergate.analyze.effects import Effect, applied
from levergate.analyze.fit import ASSUMED, Latency
from levergate.analyze.inputs import Input, Req, Skipped, from_records
from levergate.analyze.plan import plan_of
from levergate.analyze.quality import evaluation
from levergate.analyze.replay import Timing, replay
from levergate.analyze.semantic import candidates, replay_semantic
from levergate.analyze.trim import replay_trim
from levergate.config import Settings
from levergate.routing.model import load
from levergate.testing import run_virtual
from tests.unit.analyze.reqs import req
from tests.unit.analyze.test_inputs import record
from tests.unit.layers.test_route import Keywords, router_file

TIMING = Timing({}, ASSUMED, 0.002)
ROOT = Path(__file__).parents[3]
UPSTREAM = [{"name": "up", "base_url": "http://127.0.0.1:9/v1"}]
MODELS = [{"name": "gpt-4o-mini", "upstream": "up"}, {"name": "gpt-4o", "upstream": "up"}]


class Words:
    """A bag-of-words embedder (lower-cased, punctuation dropped): equal word sets are
    similarity 1, and every extra word lowers it."""

    async def embed(self, texts: list[str]) -> list[list[float]]:
        return [self.one(t) for t in texts]

    @staticmethod
    def one(text: str) -> list[float]:
        counts = Counter("".join(c for c in text.lower() if c.isalnum() or c == " ").split())
        vector = [float(counts.get(w, 0)) for w in VOCAB] + [0.001]
        norm = math.sqrt(sum(x * x for x in vector))
        return [x / norm for x in vector]


VOCAB = sorted({"what", "is", "the", "capital", "of", "france", "spain", "how", "tall", "eiffel",
                "tower", "paris", "weather", "in", "today", "a", "big", "city"})  # fmt: skip


def ask(text: str, **changes: Any) -> Req:
    body = {"model": changes.get("model", "gpt-4o-mini"),
            "messages": [{"role": "user", "content": text}], "temperature": 0}  # fmt: skip
    return req(**{"payload": body, "body": True, "fp": f"fp-{text}", **changes})


def settings_of(**more: Any) -> Settings:
    return Settings.load(upstreams=UPSTREAM, models=MODELS, **more)


SEMANTIC = {"cache": {"enabled": True, "default": {"semantic": True}}}
EXACT = {"cache": {"enabled": True}}


def semantic_hits(reqs: list[Req], **more: Any) -> set[int]:
    s = settings_of(**(more or SEMANTIC))
    primed = Primed(Words())
    wanted = candidates(s.cache, reqs)
    asyncio.run(primed.prime(wanted.values(), say=lambda _: None, what="test"))
    done = replay_semantic(s.cache, s, reqs, wanted, embedder=primed, latency=ASSUMED)
    return set(done.hits)


def test_a_reworded_question_after_the_first_answer_is_a_semantic_hit() -> None:
    reqs = [ask("What is the capital of France?", arrival=0.0, total=1.0),
            ask("what is the capital of france", arrival=5.0),
            ask("What is the capital of Spain?", arrival=10.0),  # the entities guard refuses
            ask("How tall is the Eiffel tower?", arrival=20.0)]  # fmt: skip
    assert semantic_hits(reqs) == {1}
    # Asked before the first answer completed: nothing is stored yet.
    early = [reqs[0]._replace(total=10.0), reqs[1]._replace(arrival=5.0)]
    assert semantic_hits(early) == set()
    # Other tenants have namespaces of their own.
    assert semantic_hits([reqs[0], reqs[1]._replace(tenant="other")]) == set()


def test_a_semantic_hit_is_free_in_the_replay_and_the_lever_is_measured() -> None:
    reqs = [ask("What is the capital of France?", arrival=0.0),
            ask("what is the capital of france", arrival=5.0)]  # fmt: skip
    given = Input(reqs, "test", timings=True, skipped=Skipped())
    result = analyse(given, baseline=plan_of(settings_of(**EXACT)),
                     candidate=plan_of(settings_of(**SEMANTIC)),
                     embedders=Embedders(semantic=Words()))  # fmt: skip
    (row,) = result["levers"]
    assert row["lever"] == "semantic"
    assert row["evaluable"]
    assert result["candidate"]["semantic_hits"] == 1
    assert row["change_share"] == pytest.approx(-0.5)
    assert row["quality"]["false_hit_rate"] == pytest.approx(0.007356105959228391)
    assert "false-hit rate 0.74%" in row["caveat"]


def test_a_body_lever_on_a_log_without_bodies_is_not_evaluable() -> None:
    given = Input([req(arrival=0.0), req(arrival=1.0)], "test", timings=True, skipped=Skipped())
    result = analyse(given, baseline=plan_of(settings_of(**EXACT)),
                     candidate=plan_of(settings_of(**SEMANTIC)))  # fmt: skip
    (row,) = result["not_evaluable"]
    assert row["lever"] == "semantic"
    assert "prompt's text" in row["reason"]


texts = st.sampled_from(["What is the capital of France?", "what is the capital of france",
                         "How tall is the Eiffel tower?", "how tall is the eiffel tower",
                         "What is the weather in Paris today?", "Paris is a big city"])  # fmt: skip


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(texts, st.floats(0, 60), st.floats(0.01, 5), st.sampled_from("ab")),
                max_size=12))  # fmt: skip
def test_the_semantic_cache_never_costs_more_and_counts_every_request(
    shapes: list[tuple[str, float, float, str]],
) -> None:
    reqs = sorted((ask(t, arrival=a, total=d, tenant=w) for t, a, d, w in shapes),
                  key=lambda r: r.arrival)  # fmt: skip
    hits = semantic_hits(reqs)
    on = replay(plan_of(settings_of(**SEMANTIC)), reqs, TIMING, dict.fromkeys(hits, _sem()))
    off = replay(plan_of(settings_of(cache={"enabled": False})), reqs, TIMING)
    assert on.cost_usd <= off.cost_usd + 1e-12
    assert on.requests == off.requests == len(reqs) == len(on.total)
    for at in hits:  # a hit only ever answers a question asked before, by the same tenant
        assert any(r.tenant == reqs[at].tenant and r.arrival + (r.total or 0) <= reqs[at].arrival
                   for r in reqs[:at])  # fmt: skip


def _sem() -> Effect:
    return Effect(semantic=True)


def routing(path: Path) -> dict[str, Any]:
    return {"routing": {"routes": [{"name": "auto", "default": "gpt-4o", "learned": {
        "file": str(path), "cheap": "gpt-4o-mini", "strong": "gpt-4o"}}]}}  # fmt: skip


def test_a_learned_route_sends_easy_prompts_to_the_cheap_model(tmp_path: Path) -> None:
    path = router_file(tmp_path, cheap="gpt-4o-mini", strong="gpt-4o")
    easy = ["thanks a lot", "hello there", "what time is it"]
    hard = ["prove the theorem on this integral", "derivative and integral"]
    reqs = [ask(t, arrival=float(n), model="auto", alias="gpt-4o", fp=None)
            for n, t in enumerate(easy + hard)]  # fmt: skip
    given = Input(reqs, "test", timings=True, skipped=Skipped())
    base = {"routing": {"routes": [{"name": "auto", "default": "gpt-4o"}]}}
    result = analyse(given, baseline=plan_of(settings_of(**base)),
                     candidate=plan_of(settings_of(**routing(path))),
                     embedders=Embedders(route=Keywords()))  # fmt: skip
    (row,) = result["levers"]
    assert row["lever"] == "route"
    assert row["evaluable"]
    assert result["candidate"]["rerouted"] == len(easy)
    assert result["baseline"]["rerouted"] == 0
    assert row["change_usd"] < 0
    router, _ = load(path)
    learned = row["quality"]["learned"]["auto"]
    assert (learned["retention"], learned["strong_share"]) == router.measured_at(router.threshold)
    assert row["quality"]["chosen"] == {"gpt-4o-mini": 3, "gpt-4o": 2}
    assert "retention" in row["caveat"]


def test_a_router_for_other_models_is_not_evaluable_with_the_reason(tmp_path: Path) -> None:
    path = router_file(tmp_path, cheap="llama-3-8b", strong="gpt-4o")
    given = Input([ask("hello there", model="auto", alias="gpt-4o")], "t", timings=True,
                  skipped=Skipped())  # fmt: skip
    result = analyse(given, baseline=plan_of(settings_of()),
                     candidate=plan_of(settings_of(**routing(path))),
                     embedders=Embedders(route=Keywords()))  # fmt: skip
    (row,) = result["not_evaluable"]
    assert row["lever"] == "route"
    assert "llama-3-8b" in row["reason"]


def conversation(turns: int, words: int = 200) -> dict[str, Any]:
    messages: list[dict[str, str]] = [{"role": "system", "content": "Be brief."}]
    for n in range(turns):
        messages += [
            {"role": "user", "content": f"question {n} " + "word " * words},
            {"role": "assistant", "content": f"answer {n} " + "word " * words},
        ]
    messages.append({"role": "user", "content": "and now?"})
    return {"model": "gpt-4o-mini", "messages": messages, "max_tokens": 500}


TRIM = {"trim": {"models": {"gpt-4o-mini": {"budget": 1000, "max_tokens": 100}}}}


def test_trimming_drops_history_to_the_budget_and_caps_the_output() -> None:
    s = settings_of(**TRIM)
    long, short = conversation(10), conversation(1, words=20)
    reqs = [req(payload=long, prompt=4200, output=300), req(payload=short, prompt=60, output=50)]
    done = replay_trim(s.trim, s, reqs, {})
    assert done.seen == 2
    assert done.trimmed == 1
    first = done.effects[0]
    assert done.tokens > 3000  # ten long turns left out of ~4,300 counted tokens
    assert first.prompt == 4200 - done.tokens
    assert first.output == 100
    assert (done.capped, done.output_cut) == (1, 200)
    assert first.blocks is not None
    assert first.blocks[0]
    assert 1 not in done.effects  # it fits, and its 50 output tokens are under the cap
    trimmed = replay(plan_of(s), reqs, TIMING, done.effects)
    whole = replay(plan_of(settings_of()), reqs, TIMING)
    assert trimmed.cost_usd < whole.cost_usd
    assert trimmed.trimmed_tokens == done.tokens


def test_a_prompt_whose_pinned_messages_do_not_fit_is_refused() -> None:
    s = settings_of(trim={"models": {"gpt-4o-mini": {"budget": 50}}})
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "word " * 400}]}
    done = replay_trim(s.trim, s, [req(payload=body, prompt=400)], {})
    assert done.refused == 1
    assert done.effects[0].refused
    run = replay(plan_of(s), [req(payload=body, prompt=400)], TIMING, done.effects)
    assert (run.refused, run.cost_usd) == (1, 0.0)


@given(st.integers(0, 12), st.integers(5, 120), st.integers(200, 3000))
@settings(max_examples=25, deadline=None)
def test_trimming_never_sends_more_prompt_tokens(turns: int, words: int, budget: int) -> None:
    s = settings_of(trim={"models": {"gpt-4o-mini": {"budget": budget}}})
    body = conversation(turns, words)
    logged = req(payload=body, prompt=turns * 2 * (words + 6) + 20)
    done = replay_trim(s.trim, s, [logged], {})
    effect = done.effects.get(0)
    if effect is not None and not effect.refused:
        assert (effect.prompt or logged.prompt) <= logged.prompt


CASCADE = {"cascade": {"checks": [{"kind": "json"}]}}


def test_a_cascade_escalates_the_logged_answers_its_checks_reject() -> None:
    s = settings_of(**CASCADE)
    name = "cascade:gpt-4o-mini>gpt-4o"
    answers = ['{"a": 1}', "not json", '{"b": 2}', "plain words"]
    reqs = [req(payload={"model": name, "messages": [{"role": "user", "content": "q"}]},
                model=name, alias="gpt-4o-mini", answer=a, arrival=float(n), fp=None)
            for n, a in enumerate(answers)]  # fmt: skip
    reqs.append(reqs[0]._replace(alias="gpt-4o", escalations=1, answer=None))  # escalated
    reqs.append(reqs[0]._replace(answer=None))  # bodies off: unknown
    done = replay_cascades(s.cascade, s, reqs)
    assert (done.cascaded, done.known, done.escalated) == (6, 5, 3)
    assert done.escalation_rate == pytest.approx(3 / 5)
    assert done.unknown == {"the answer was not logged (bodies off for the route)": 1}
    assert sorted(done.effects) == [1, 3, 4]
    run = replay(plan_of(s), reqs, TIMING, done.effects)
    plain = replay(plan_of(s), reqs, TIMING)
    assert run.escalated == 3
    assert run.cost_usd > plain.cost_usd
    judged = settings_of(cascade={"checks": [{"kind": "judge", "alias": "gpt-4o"}]})
    assert replay_cascades(judged.cascade, judged, reqs[:1]).unknown == {
        "a judge check is a model call": 1}  # fmt: skip


def test_the_shipped_semantic_evaluation_is_the_benchmarks_own() -> None:
    results = json.loads((ROOT / "benchmarks/results/cache_semantic_eval.json").read_text())
    qqp = results["sets"]["qqp_dev"]
    shipped = evaluation()
    assert shipped["guards"] == results["shipped"]["guards"]
    for name in ("with_guards", "without_guards"):
        fields = ("threshold", "precision", "recall", "false_hit_rate")
        assert shipped[name] == [{k: r[k] for k in fields} for r in qqp[name]]


latencies = st.builds(Latency, st.floats(0, 500), st.floats(0, 1), st.floats(1, 200))


@given(latencies, st.integers(1, 5000), st.integers(0, 5000), st.integers(1, 400),
       st.integers(0, 400))  # fmt: skip
def test_an_effect_moves_a_requests_time_by_the_fitted_model(
    model: Latency, prompt: int, sent: int, output: int, capped: int
) -> None:
    logged = req(prompt=prompt, output=output, total=5.0, ttft=1.0)
    fitted = {"gpt-4o-mini": model}
    trimmed = applied(logged, Effect(prompt=min(sent, prompt)), fitted, ASSUMED)
    assert trimmed.prompt == min(sent, prompt)
    assert trimmed.total == pytest.approx(max(0.0, 5.0 + model.shift(trimmed.prompt - prompt)))
    assert (trimmed.total or 0.0) <= 5.0  # fewer prompt tokens never take longer
    cut = applied(logged, Effect(output=capped), fitted, ASSUMED)
    assert cut.output == min(capped, output)
    assert (cut.total or 0.0) <= 5.0
    moved = applied(logged, Effect(alias="gpt-4o"), fitted, ASSUMED)
    assert (moved.alias, moved.total, moved.ttft) == ("gpt-4o", None, None)  # the model's times


def test_lookups_faster_than_the_embedder_wait_in_its_queue() -> None:
    primed = Primed(Words())
    asyncio.run(primed.prime([f"text {n}" for n in range(8)], say=lambda _: None, what="t"))
    primed.each = 0.001
    queued = Queued(primed, first=0.01, most=4)

    async def burst() -> list[float]:
        loop = asyncio.get_running_loop()

        async def one(n: int) -> float:
            await queued.embed([f"text {n}"])
            return loop.time()

        return await asyncio.gather(*(one(n) for n in range(8)))

    done = run_virtual(burst())
    # One batch at a time, the waiting texts taken together, at most four: 10 ms + 3 x 1 ms.
    assert done == pytest.approx([0.013] * 4 + [0.026] * 4)


def test_a_logged_body_is_replayed_only_when_it_was_kept_whole() -> None:
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}
    whole = record(0, "hi", request_body=json.dumps(body), answer_body="hello",
                   trimmed_tokens=12, escalations=1)  # fmt: skip
    cut = record(1, "hi", request_body=json.dumps(body)[:20] + "[truncated: 999 bytes]")
    given = from_records([("a", whole), ("b", cut)], source="t", skipped=Skipped())
    first, second = given.requests
    assert (first.payload, first.answer, first.trimmed, first.escalations) == (
        body, "hello", 12, 1)  # fmt: skip
    assert second.payload is None
    assert second.body
    result = analyse(Input([second], "t", timings=True, skipped=Skipped()),
                     baseline=plan_of(settings_of(**EXACT)),
                     candidate=plan_of(settings_of(**SEMANTIC)))  # fmt: skip
    assert "cut at request_log.bodies.max_bytes" in result["not_evaluable"][0]["reason"]
