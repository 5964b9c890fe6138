"""The deadline picks the provider's batch API, and deferred requests share one provider batch
(issue 26 §2): async requests through a real gateway on loopback, the simulator as the provider.

- Requests to a model with no flex price and a deadline two days off are deferred by the tier
  policy (no `x-levergate-defer`) and, sent together, reach the provider as ONE batch; each
  gets its own answer and its record says `batch`.
- The same model with a deadline of minutes runs now, at standard.
- A model sold at flex (the same discount, sooner) runs now at flex, even two days off.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from levergate.app import build_gateway
from levergate.config import Settings
from levergate.layers.measure.record import RequestRecord
from levergate.pipeline import Deps
from levergate.server.run import serving
from levergate.simulator import SimHandle, SimSettings, run_simulator
from tests.e2e.test_batch_api import batch_settings
from tests.e2e.test_defer import stats

OLD = "gpt-4o-mini"  # batch discount, no flex price
NEW = "gpt-5-mini"  # flex at the batch rate
ASK = {"max_tokens": 3, "messages": [{"role": "user", "content": "Summarise the report."}]}


class Records:
    def __init__(self) -> None:
        self.seen: dict[str, RequestRecord] = {}

    def emit(self, record: RequestRecord) -> None:
        self.seen[record.request_id] = record


@pytest.fixture
async def sim() -> AsyncIterator[SimHandle]:
    async with run_simulator(SimSettings(port=0)) as handle:
        yield handle


@pytest.fixture
async def gateway(
    sim: SimHandle, tmp_path: Path
) -> AsyncIterator[tuple[str, Records]]:  # fmt: skip
    records = Records()
    settings = Settings.load(
        server={"port": 0},
        upstreams=[{"name": "sim", "base_url": sim.base_url, "api_key": "sk-sim-openai"}],
        models=[{"name": OLD, "upstream": "sim"}, {"name": NEW, "upstream": "sim"}],
        batch=batch_settings(tmp_path),
        async_requests={"enabled": True},
        defer={"enabled": True, "poll_first_seconds": 0.05, "poll_max_seconds": 0.2,
               "pack_max_wait_seconds": 1.0},
        tiers={"enabled": True},
    )  # fmt: skip
    async with build_gateway(settings, deps=Deps(sinks=[records])) as gw, serving(gw) as url:
        yield url, records


async def submit(http: httpx.AsyncClient, model: str, *, hours: float) -> dict[str, Any]:
    deadline = str(int(time.time() + hours * 3600))
    made = await http.post("/async/chat/completions", json={"model": model, **ASK},
                           headers={"x-levergate-deadline": deadline})  # fmt: skip
    assert made.status_code == 202, made.text
    return made.json()  # type: ignore[no-any-return]


async def finished(http: httpx.AsyncClient, request_id: str) -> dict[str, Any]:
    for _ in range(600):
        found: dict[str, Any] = (await http.get(f"/async/{request_id}")).json()
        if found["status"] != "pending":
            return found
        await asyncio.sleep(0.05)
    raise AssertionError(f"{request_id} never finished")


async def records_of(records: Records, *ids: str) -> list[RequestRecord]:
    for _ in range(200):
        if all(f"{i}-0" in records.seen for i in ids):
            return [records.seen[f"{i}-0"] for i in ids]
        await asyncio.sleep(0.05)
    raise AssertionError("no records")


async def test_far_deadlines_defer_by_the_policy_and_share_one_provider_batch(
    sim: SimHandle, gateway: tuple[str, Records]
) -> None:
    url, records = gateway
    async with httpx.AsyncClient(base_url=url) as http:
        made = [await submit(http, OLD, hours=48) for _ in range(5)]
        assert all(m["deferred"] for m in made)
        done = [await finished(http, m["id"]) for m in made]
        answered = await records_of(records, *(m["id"] for m in made))
    assert {d["status"] for d in done} == {"completed"}
    ids = {d["response"]["body"]["id"] for d in done}
    assert len(ids) == 5  # each its own answer
    seen = await stats(sim)
    assert seen["batch_api"]["batches_created"] == 1  # packed, not five one-line batches
    assert seen["batch_api"]["lines_answered"] == 5
    assert "/v1/chat/completions" not in seen["requests_by_endpoint"]
    assert {(r.tier, r.origin) for r in answered} == {("batch", "deferred")}


async def test_a_deadline_of_minutes_runs_now_and_a_flex_model_runs_at_flex(
    sim: SimHandle, gateway: tuple[str, Records]
) -> None:
    url, records = gateway
    async with httpx.AsyncClient(base_url=url) as http:
        soon = await submit(http, OLD, hours=0.2)
        flexible = await submit(http, NEW, hours=48)
        assert (soon["deferred"], flexible["deferred"]) == (False, False)
        await finished(http, soon["id"])
        await finished(http, flexible["id"])
        now, flex = await records_of(records, soon["id"], flexible["id"])
    assert (now.tier, now.origin, now.deadline is not None) == ("standard", "async", True)
    assert (flex.tier, flex.tier_assumed) == ("flex", False)  # the simulator said so
    decision = flex.tier_decision
    assert decision is not None
    assert decision.reason == "cheapest in time"
    seen = await stats(sim)
    assert seen["tiers"]["flex"]["requests"] == 1
    assert seen["batch_api"]["batches_created"] == 0


@pytest.mark.parametrize("seconds", [-1, 0])
async def test_a_deadline_already_past_is_a_400(gateway: tuple[str, Records], seconds: int) -> None:
    url, _ = gateway
    async with httpx.AsyncClient(base_url=url) as http:
        made = await http.post(
            "/async/chat/completions",
            json={"model": OLD, **ASK},
            headers={"x-levergate-deadline": str(int(time.time()) + seconds)},
        )
    assert made.status_code == 400
    assert made.json()["error"]["param"] == "x-levergate-deadline"
