"""The semantic cache's verifications (layers/cache/checks.py), built as the pipeline builds them
(`semantic_layer`) over a scripted upstream and the bag-of-words embedder: a sampled miss in the
band is served normally and its would-be hit compared with the answer it got, a sampled hit is
compared with what the model answers again off the path, and each sampled lookup is one label
with its similarity; sampling is bounded by its rate and its per-minute bucket."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from levergate.config import Settings
from levergate.core.call import Call
from levergate.core.reply import Completed, Reply
from levergate.core.service import Service
from levergate.layers.cache.build import semantic_layer
from levergate.layers.measure.shadow_labels import ShadowLabel
from levergate.layers.shared import Shared
from levergate.testing import FakeUpstream, ManualClock
from tests.unit.layers.cache.helpers import drain, text_of
from tests.unit.layers.cache.test_semantic import BagOfWords, ask
from tests.waiting import running, until

ANSWERS = {
    "capital of France": "Paris",
    "capital of France weather today": "Paris",  # the near miss's own answer agrees
    "capital of France museum tickets": "Lyon",  # this one's does not
    "capital France": "Paris",  # the hit's real answer agrees
    "France capital now": "Marseille",  # this hit's does not
}


class Answers(FakeUpstream):
    """Answers each question with `ANSWERS`' one word, whole or streamed."""

    async def __call__(self, call: Call) -> Reply:
        self.words = (ANSWERS.get(call.body["messages"][-1]["content"], "Unknown"),)
        return await super().__call__(call)


def built(
    tmp_path: Path, clock: ManualClock | None = None, **calibration: Any
) -> tuple[Service, Shared, list[ShadowLabel], Answers]:
    s = Settings.load(
        upstreams=[{"name": "up", "base_url": "http://127.0.0.1:9"}],
        models=[{"name": "m", "upstream": "up"}],
        cache={"default": {"semantic": True},
               "semantic": {"threshold": 0.8, "guards": [],
                            "thresholds_file": str(tmp_path / "thresholds.json"),
                            "calibration": {"rate": 1.0, "band": 0.3, **calibration}}},
    )  # fmt: skip
    shared = Shared.build(s, models={m.name: m for m in s.models}, clock=clock or ManualClock(),
                          registry=CollectorRegistry())  # fmt: skip
    heard: list[ShadowLabel] = []
    shared.shadow_labels.listen(heard.append)
    upstream = Answers()
    layer = semantic_layer(s.cache, shared=shared, routes=upstream, embedder=BagOfWords())
    assert layer is not None
    return layer(upstream), shared, heard, upstream


def content(reply: Reply) -> str:
    assert isinstance(reply, Completed)
    return str(reply.data["choices"][0]["message"]["content"])


async def test_near_misses_and_hits_are_verified_off_the_path_as_labels(tmp_path: Path) -> None:
    cache, shared, heard, upstream = built(tmp_path)
    (job,) = [j for j in shared.jobs if j.name == "semantic_cache_check"]
    async with running(job.run):
        first = await cache(ask("capital of France"))
        near = await cache(ask("capital of France weather today"))  # 0.71: in the band
        other = await cache(ask("capital of France museum tickets"))
        hit = await cache(ask("capital France"))  # 1.0: served
        wrong = await cache(ask("France capital now"))  # 0.82: served
        await until(lambda: len(heard) == 5)
    # Near misses are served normally: the client gets the model's own answer.
    assert [content(r) for r in (first, near, other)] == ["Paris", "Paris", "Lyon"]
    assert hit.headers["x-levergate-cache"] == "semantic"
    assert content(hit) == content(wrong) == "Paris"  # both served from the cache
    client = [c for c in upstream.calls if not c.ctx.request_id.startswith("shadow-")]
    assert len(client) == 3
    asked_again = [c.body["messages"][-1]["content"] for c in upstream.calls
                   if c.ctx.request_id.startswith("shadow-")]  # fmt: skip
    assert sorted(asked_again) == ["France capital now", "capital France"]
    found = {label.prompt: label for label in heard}
    assert found["capital of France"].result == "none"  # nothing stored yet
    assert found["capital of France"].similarity is None
    assert found["capital of France weather today"].result == "agree"
    assert 0.5 <= (found["capital of France weather today"].similarity or 0) < 0.8
    museum = found["capital of France museum tickets"]
    assert museum.result == "disagree"
    assert (museum.cheap_text, museum.strong_text) == ("Paris", "Lyon")  # would-be hit, real
    assert museum.similarity == found["capital of France weather today"].similarity  # to A
    assert (found["capital France"].result, found["France capital now"].result) == (
        "agree", "disagree")  # fmt: skip
    assert found["capital France"].similarity == pytest.approx(1.0)
    assert 0.8 <= (found["France capital now"].similarity or 0) < 1.0
    for label in heard:
        assert (label.layer, label.name, label.cheap, label.strong) == ("semantic", "m", "cache",
                                                                        "m")  # fmt: skip
        assert '"floor":0.5' in (label.detail or "")


async def test_a_streamed_near_miss_is_checked_once_it_has_ended(tmp_path: Path) -> None:
    cache, shared, heard, _ = built(tmp_path)
    (job,) = [j for j in shared.jobs if j.name == "semantic_cache_check"]
    async with running(job.run):
        await cache(ask("capital of France"))
        streamed = await cache(ask("capital of France museum tickets", stream=True))
        assert text_of(await drain(streamed)) == "Lyon"
        await until(lambda: len(heard) == 2)
    assert heard[1].result == "disagree"
    assert heard[1].strong_text == "Lyon"


async def test_sampling_is_bounded_by_the_per_minute_bucket(tmp_path: Path) -> None:
    clock = ManualClock()
    cache, _, heard, _ = built(tmp_path, clock, per_minute=30)  # bursts of 3, then 1 per 2 s
    # Each in a partition of its own (its system prompt): nothing found, a `none` label at once.
    for i in range(6):
        await cache(ask("a question", system=f"system {i}"))
    assert len(heard) == 3
    clock.advance(2.0)
    for i in range(6, 9):
        await cache(ask("a question", system=f"system {i}"))
    assert len(heard) == 4


async def test_a_full_queue_drops_the_check_and_counts_it(tmp_path: Path) -> None:
    cache, shared, heard, _ = built(tmp_path, queue=1)
    await cache(ask("capital of France"))
    for question in ("capital of France weather today", "capital of France history books"):
        await cache(ask(question))  # no worker runs: the second finds the queue full
    assert len(heard) == 1
    dropped = shared.registry.get_sample_value("levergate_semantic_cache_checks_total",
                                               {"route": "m", "result": "dropped"})  # fmt: skip
    assert dropped == 1
