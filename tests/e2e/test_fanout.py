"""`gw.map` against the real simulator behind a rate limit shared through Redis: a fan-out on two
replicas at once stays inside the provider's limit (no 429s), and interactive calls made
meanwhile jump the fan-out's queue instead of waiting behind it.

Needs Redis at 127.0.0.1:6379: skipped with a reason outside CI, a failure under CI=true."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from levergate import Controls, Deps, Gateway, LevergateError, Priority, RequestRecord, Settings
from levergate.simulator import LimitSettings, SimHandle, SimSettings, run_simulator
from tests.redis_required import require_redis

REDIS_URL = "redis://127.0.0.1:6379/15"
LIMITS = {"rpm": 10, "window_seconds": 1.0, "margin": 0.05}


@pytest.fixture
async def limited() -> AsyncIterator[SimHandle]:
    """A provider allowing 10 requests per key in any one-second window."""
    settings = SimSettings(port=0, limits=LimitSettings(rpm=10, window_seconds=1.0))
    async with run_simulator(settings) as handle:
        yield handle


def shared_settings(sim: SimHandle) -> Settings:
    return Settings.load(
        upstreams=[
            {"name": "p", "base_url": sim.base_url, "api_key": "sk-one", "key_limits": LIMITS}
        ],
        models=[{"name": "m", "upstream": "p"}],
        cache={"enabled": False},
        traffic={"redis_prefix": f"fan:{{{uuid.uuid4()}}}:"},
        stores={"default": {"redis_url": REDIS_URL}},
    )


async def test_a_fan_out_on_two_replicas_keeps_to_the_shared_limit(limited: SimHandle) -> None:
    await require_redis(REDIS_URL)
    settings = shared_settings(limited)
    done: list[int] = []
    interactive_at: list[int] = []

    async def interactive(gw: Gateway) -> None:
        while not done:  # once the fan-out is under way
            await asyncio.sleep(0.01)
        for _ in range(3):
            await gw.chat(model="m", messages=[{"role": "user", "content": "now"}],
                          priority="interactive", max_tokens=2)  # fmt: skip
            interactive_at.append(len(done))

    async with Gateway(settings) as one, Gateway(settings) as two:
        first, second, _ = await asyncio.gather(
            one.map([f"q{i}" for i in range(24)], model="m", max_concurrency=8,
                    progress=lambda n, _total: done.append(n)),
            two.map([f"r{i}" for i in range(10)], model="m", max_concurrency=8),
            interactive(one),
        )  # fmt: skip
    assert all(isinstance(r, dict) for r in [*first, *second]), [*first, *second]
    # Every item in its slot: the simulator echoes nothing, but each answer is a completion.
    assert all(r["object"] == "chat.completion" for r in first if isinstance(r, dict))
    # Two replicas, one limit kept in Redis: the provider refused (almost) nothing.
    assert limited.stats()["rate_limited"] <= 1
    # The interactive calls were served ahead of the fan-out's queue, not after it.
    assert len(interactive_at) == 3
    assert interactive_at[-1] < 24 - 8, interactive_at


async def test_a_deadline_for_the_whole_fan_out_returns_what_finished(limited: SimHandle) -> None:
    """One deadline for every item (controls): `map` returns with each finished answer in its
    slot and a deadline error in the others, and the items that could not be served in time
    never reached the provider."""
    settings = Settings.load(
        upstreams=[
            {"name": "p", "base_url": limited.base_url, "api_key": "sk-dl", "key_limits": LIMITS}
        ],
        models=[{"name": "m", "upstream": "p"}],
        cache={"enabled": False},
    )
    async with Gateway(settings) as gw:
        stop = Controls(deadline=gw.clock.now() + 0.5)
        results = await gw.map([f"d{i}" for i in range(30)], model="m", max_concurrency=30,
                               controls=stop)  # fmt: skip
    answered = [r for r in results if isinstance(r, dict)]
    refused = [r for r in results if not isinstance(r, dict)]
    assert answered  # the first ones, admitted at once
    assert refused  # 30 at 10 per second cannot all finish in half a second
    assert all(isinstance(r, LevergateError) and r.http_status in (503, 504) for r in refused)
    # 504: cut off in flight at the deadline; 503: refused here, never sent.
    cut = [r for r in refused if isinstance(r, LevergateError) and r.http_status == 504]
    assert len(refused) > len(cut)
    assert limited.stats()["requests_total"] <= len(answered) + len(cut)
    assert limited.stats()["rate_limited"] == 0


async def test_mixed_items_each_get_their_own_error(limited: SimHandle) -> None:
    async with Gateway(Settings.for_upstream(limited.base_url)) as gw:
        items: list[Any] = ["fine", {"messages": []}, 7, {"model": "m", "messages": "x"}, "ok"]
        results = await gw.map(items, model="m", max_concurrency=2, bar=True)  # a rich bar
        assert isinstance(results[0], dict)
        assert isinstance(results[4], dict)
        for bad in results[1:4]:
            assert isinstance(bad, LevergateError)
            assert bad.http_status == 400
        # errgroup: the bad item's error is raised, and the items not yet started never start.
        before = limited.stats()["requests_total"]
        with pytest.raises(LevergateError, match="fan-out item"):
            await gw.map([items[2], *["more"] * 30], model="m", max_concurrency=2,
                         on_error="raise")  # fmt: skip
        assert limited.stats()["requests_total"] - before < 30
        with pytest.raises(ValueError, match="max_concurrency"):
            await gw.map(["x"], model="m", max_concurrency=0)
        with pytest.raises(ValueError, match="kind"):
            await gw.map(["x"], model="m", kind="image")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="rate"):
            await gw.map(["x"], model="m", rate=-1)
        with pytest.raises(LevergateError, match="workflow"):
            await gw.map(["x"], model="m", workflow="no spaces allowed")


class Records:
    def __init__(self) -> None:
        self.seen: list[RequestRecord] = []

    def emit(self, record: RequestRecord) -> None:
        self.seen.append(record)

    async def settled(self, count: int) -> list[RequestRecord]:
        for _ in range(400):
            if len(self.seen) >= count:
                return self.seen
            await asyncio.sleep(0.01)
        raise AssertionError(f"{len(self.seen)} records, expected {count}")


async def test_a_workflow_and_a_fan_out_tie_their_records_together(sim: SimHandle) -> None:
    records = Records()
    settings = Settings.for_upstream(sim.base_url)
    async with Gateway(settings, deps=Deps(sinks=[records])) as gw:
        question = [{"role": "user", "content": "Which is faster?"}]
        async with gw.workflow("rag-7", timeout=30, max_parallel=3) as wf:
            docs, hints = await wf.gather(
                ("retrieve", lambda c: gw.embed(model="m", input="faster", controls=c)),
                ("hints", lambda c: gw.chat(model="m", messages=question, controls=c)),
            )
            answer = await wf.run(
                "answer", lambda c: gw.chat(model="m", messages=question, controls=c)
            )
        assert docs["data"]
        assert hints["choices"]
        assert answer["choices"]
        mapped = await gw.map(["a", "b"], model="m", workflow="rag-7", feature="expand")
        assert all(isinstance(r, dict) for r in mapped)
        seen = await records.settled(5)
    assert {r.workflow for r in seen} == {"rag-7"}
    assert sorted(r.feature for r in seen) == ["answer", "expand", "expand", "hints", "retrieve"]
    by_feature = {r.feature: r for r in seen}
    assert by_feature["expand"].priority is Priority.BATCH  # a fan-out runs as batch
    assert by_feature["answer"].priority is Priority.DEFAULT
    assert by_feature["answer"].deadline == wf.deadline  # the workflow's, passed down
    assert wf.critical_path()[-1] == "answer"
