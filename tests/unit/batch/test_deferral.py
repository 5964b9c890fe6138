"""The deferral state machine and the webhook delivery schedule, step by step on a ManualClock:
the simulator (in this process, on the same clock) is the provider, so its batch API's
turnaround is virtual time too; the job store is a real SQLite file. A second `Deferral` on the
same store is what a restarted gateway is."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from levergate.app import build_gateway
from levergate.batch.async_requests import AsyncRequests, controls
from levergate.batch.defer import Deferral
from levergate.batch.extension import service_of
from levergate.batch.model import Job, LineRow
from levergate.config import DeferSettings, Settings, WebhooksSettings
from levergate.control_headers import async_ask
from levergate.errors import BadRequest
from levergate.gateway import Gateway
from levergate.layers.measure.record import RequestRecord
from levergate.pipeline import Deps
from levergate.policies.pricing import Lever
from levergate.simulator import SimHandle, SimSettings, run_simulator
from levergate.simulator.settings import BatchApiSettings
from levergate.testing import ManualClock

MODEL = "gpt-4o-mini"
TURNAROUND = 200.0
BODY = {"model": MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(start=1_700_000_000.0)


@pytest.fixture
async def sim(clock: ManualClock) -> AsyncIterator[SimHandle]:
    settings = SimSettings(port=0, batch_api=BatchApiSettings(turnaround_seconds=TURNAROUND))
    async with run_simulator(settings, clock=clock) as handle:
        yield handle


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # nothing listens once it is closed


class Records:
    """A sink passed in `Deps.sinks`, as a request log would be."""

    def __init__(self) -> None:
        self.seen: list[RequestRecord] = []

    def emit(self, record: RequestRecord) -> None:
        self.seen.append(record)


@pytest.fixture
def records() -> Records:
    return Records()


@pytest.fixture
async def gateway(sim: SimHandle, tmp_path: Path, records: Records) -> AsyncIterator[Gateway]:
    settings = Settings.load(
        upstreams=[{"name": "sim", "base_url": sim.base_url, "api_key": "sk-sim-openai"}],
        models=[{"name": MODEL, "upstream": "sim"}],
        batch={"enabled": True, "dir": str(tmp_path / "files"),
               "store": {"sqlite_path": str(tmp_path / "jobs.sqlite3")}},
        defer={"enabled": True, "routes": {MODEL: {}}, "poll_first_seconds": 10,
               "poll_factor": 2, "poll_max_seconds": 40, "pack_max_wait_seconds": 0},
        async_requests={"enabled": True},
        webhooks={"targets": {"ops": {"url": f"http://127.0.0.1:{closed_port()}/",
                                      "secret": "whsec-0123456789abcdef"}},
                  "max_attempts": 4, "backoff_base_seconds": 3, "backoff_factor": 3,
                  "backoff_max_seconds": 20},
    )  # fmt: skip
    found = build_gateway(settings, deps=Deps(sinks=[records]))
    yield found
    await found.aclose()


async def deferred_job(gateway: Gateway, clock: ManualClock, **extra: Any) -> Job:
    batch = service_of(gateway.extensions)
    assert batch is not None
    job = Job(id="areq_unit", tenant="acme", status="validating", endpoint="/v1/chat/completions",
              input_file_id="", created_at=int(clock.now()), expires_at=int(clock.now()) + 86400,
              kind="async", extra={"request": BODY, "defer": {"parts": None}, **extra})  # fmt: skip
    await batch.store.add_lines(job.id, [LineRow(0, "request", orjson.dumps(BODY))])
    await batch.store.add_job(job)
    return job


async def step(deferral: Deferral, gateway: Gateway, job_id: str) -> tuple[bool | None, Job]:
    batch = service_of(gateway.extensions)
    assert batch is not None
    job = await batch.store.get_job(job_id, tenant=None)
    assert job is not None
    done = await deferral.step(job, batch.runner)
    after = await batch.store.get_job(job_id, tenant=None)
    assert after is not None
    return done, after


def part(job: Job) -> dict[str, Any]:
    parts = job.extra["defer"]["parts"]
    assert len(parts) == 1
    return parts[0]  # type: ignore[no-any-return]


async def test_the_deferral_walks_its_states_polls_with_backoff_and_resumes_after_a_crash(
    gateway: Gateway, clock: ManualClock, sim: SimHandle, records: Records
) -> None:
    batch = service_of(gateway.extensions)
    assert batch is not None
    store, disk = batch.store, batch.disk
    first = Deferral(gateway, store=store, clock=clock, disk=disk)
    await deferred_job(gateway, clock)
    states = []
    for _ in range(3):
        done, job = await step(first, gateway, "areq_unit")
        assert done is True
        states.append(part(job)["state"])
    assert states == ["new", "uploaded", "submitted"]
    submitted = part(job)
    assert submitted["batch"].startswith("batch_sim")
    assert submitted["next_at"] == clock.now() + 10
    assert (await step(first, gateway, "areq_unit"))[0] is False  # not yet due: nothing asked
    waits = []
    for _ in range(4):
        clock.advance(part(job)["next_at"] - clock.now())
        done, job = await step(first, gateway, "areq_unit")
        assert done is True
        assert part(job)["state"] == "submitted"
        waits.append(part(job)["next_at"] - clock.now())
    assert waits == [20, 40, 40, 40]  # 10, then doubling, capped at 40
    await first.aclose()
    # A restarted gateway: a new Deferral on the same store polls the SAME provider batch.
    second = Deferral(gateway, store=store, clock=clock, disk=disk)
    clock.advance(TURNAROUND)
    done, job = await step(second, gateway, "areq_unit")
    assert part(job)["state"] == "ended"
    assert part(job)["batch"] == submitted["batch"]
    assert records.seen == []
    done, job = await step(second, gateway, "areq_unit")
    assert part(job)["state"] == "done"
    counts = await store.counts("areq_unit")
    assert (counts.ok, counts.failed) == (1, 0)
    # The deferred line's answer went through the gateway's one Recorder: a Deps sink sees it.
    (record,) = records.seen
    assert (record.request_id, record.origin, record.kind) == ("areq_unit-0", "deferred", "chat")
    assert (record.tenant, record.tier, record.batch, record.model) == (
        "acme",
        "batch",
        True,
        MODEL,
    )
    assert record.upstream == "sim"
    assert record.tokens.output > 0
    assert record.cost_usd > 0
    assert record.savings[Lever.BATCH] > 0  # priced at the provider's batch discount
    done, job = await step(second, gateway, "areq_unit")
    assert job.status == "in_progress"  # the runner finalizes it from here
    assert sim.simulator.batch_api.created == 1
    assert not Path(submitted["path"]).exists()  # the provider input file is gone
    await second.aclose()


async def test_webhook_delivery_backs_off_on_the_clock_then_gives_up(
    gateway: Gateway, clock: ManualClock
) -> None:
    batch = service_of(gateway.extensions)
    assert batch is not None
    s = gateway.settings
    store = batch.store
    requests = AsyncRequests(settings=s.async_requests, defer=s.defer, hooks=s.webhooks,
                             store=store, clock=clock, deferral=None, limits=s.limits,
                             quotas=batch.quotas)  # fmt: skip
    hook = {"target": "ops", "attempts": 0, "state": "pending", "event": "evt_unit"}
    job = await deferred_job(gateway, clock, webhook=hook)
    await store.finish(job.id, [(0, True, b'{"custom_id":"request","response":null}')])
    job = job.moved("in_progress", now=clock.now()).moved("finalizing", now=clock.now(),
                                                           end="completed")  # fmt: skip
    await store.save(job, expect="validating")
    waits = []
    for _ in range(4):
        current = await store.get_job(job.id, tenant=None)
        assert current is not None
        # The step only offers the notice to the delivery workers; one of them attempts it.
        assert await requests.step(current, batch.runner) is False
        await requests.deliveries.attempt(current)
        after = await store.get_job(job.id, tenant=None)
        assert after is not None
        if after.status == "finalizing":
            waits.append(after.extra["webhook"]["next_at"] - clock.now())
            assert await requests.step(after, batch.runner) is False  # not due yet
            clock.advance(waits[-1])
    assert waits == [3, 9, 20]  # base 3, x3, capped at 20; the 4th attempt is the last
    assert after is not None
    assert after.status == "completed"
    assert after.extra["webhook"]["state"] == "failed"
    assert after.extra["webhook"]["attempts"] == 4
    await requests.aclose()


HOOKS = WebhooksSettings.model_validate(
    {"targets": {"ops": {"url": "https://hooks.example/x", "secret": "s" * 16}}}
)


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        ({"x-levergate-webhook": "https://evil.example/"}, "URLs are not accepted"),
        ({"x-levergate-webhook": "nope"}, "Unknown webhook target"),
        ({"x-levergate-defer": "2h"}, "24h"),
        ({"x-levergate-deadline": "tomorrow"}, "Unix time"),
        ({"x-levergate-async": "maybe"}, "true or false"),
        ({"x-levergate-webhook": "ops"}, "for async requests"),
    ],
)
def test_controls_refuse_bad_headers(headers: dict[str, str], message: str) -> None:
    with pytest.raises(BadRequest, match=message):
        controls(async_ask(headers), now=0, defer=DeferSettings(), hooks=HOOKS, dedicated=False)


def test_a_far_deadline_defers_and_a_near_one_does_not() -> None:
    defer = DeferSettings(min_deadline_seconds=3600)
    far = controls(async_ask({"x-levergate-deadline": "7200"}), now=0, defer=defer,
                   hooks=HOOKS, dedicated=False)  # fmt: skip
    near = controls(async_ask({"x-levergate-deadline": "60", "x-levergate-async": "true"}),
                    now=0, defer=defer, hooks=HOOKS, dedicated=False)  # fmt: skip
    assert (far.asked, far.defer) == (True, True)
    assert (near.asked, near.defer) == (True, False)
