"""Traffic control against the real simulator on loopback: 429 storms, 5xx bursts, hangs,
cut streams, a dead endpoint among three, priorities under a batch flood, and a Redis outage.
Times are compressed (limit windows of one second); assertions are about behaviour — what
clients saw, how many attempts reached the provider, which state an endpoint is in — never
about how long anything took."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from levergate.config import Settings
from levergate.errors import LevergateError
from levergate.gateway import Gateway
from levergate.policies.ejection import State
from levergate.simulator import (
    FaultSettings,
    LimitSettings,
    SimHandle,
    SimSettings,
    run_simulator,
)
from levergate.testing import sample_value

USER = [{"role": "user", "content": "Say something simulated."}]


@contextlib.asynccontextmanager
async def gateway(
    upstreams: Sequence[dict[str, Any]],
    *,
    traffic: dict[str, Any] | None = None,
    stores: dict[str, Any] | None = None,
) -> AsyncIterator[Gateway]:
    settings = Settings.load(
        upstreams=list(upstreams),
        models=[{"name": "m", "endpoints": [{"upstream": u["name"]} for u in upstreams]}],
        traffic={"seed": 1, **(traffic or {})},
        stores=stores or {},
    )
    async with Gateway(settings) as gw:
        yield gw


async def ask(gw: Gateway, *, stream: bool = False, headers: dict[str, str] | None = None) -> str:
    """One chat call; the outcome as the client sees it ("ok" or the error type)."""
    try:
        reply = await gw.chat(
            model="m", messages=USER, max_tokens=8, stream=stream, headers=headers
        )
        if stream:
            assert not isinstance(reply, dict)
            async for _ in reply:
                pass
    except LevergateError as exc:
        return f"{exc.http_status}"
    return "ok"


def sim_requests(sim: SimHandle) -> int:
    return int(sim.stats()["requests_by_endpoint"].get("/v1/chat/completions", 0))


def upstream(name: str, sim: SimHandle | str, **extra: Any) -> dict[str, Any]:
    url = sim if isinstance(sim, str) else sim.base_url
    key = {} if "api_keys" in extra else {"api_key": f"sk-{name}"}
    return {"name": name, "base_url": url, **key, **extra}


@pytest.fixture
async def limited() -> AsyncIterator[SimHandle]:
    """A provider allowing 10 requests per key in any one-second window."""
    async with run_simulator(
        SimSettings(port=0, limits=LimitSettings(rpm=10, window_seconds=1.0))
    ) as handle:
        yield handle


async def test_a_429_storm_is_absorbed_by_the_limiter(limited: SimHandle) -> None:
    limits = {"rpm": 10, "window_seconds": 1.0, "margin": 0.05}
    async with gateway([upstream("p", limited, key_limits=limits)]) as gw:
        outcomes = await asyncio.gather(*(ask(gw) for _ in range(30)))
    assert outcomes == ["ok"] * 30
    # The limiter paced the burst: the provider refused (almost) nothing.
    assert limited.stats()["rate_limited"] <= 1


async def test_without_known_limits_retries_floored_by_retry_after_still_deliver(
    limited: SimHandle,
) -> None:
    retry = {"budget_min_per_second": 20, "max_attempts": 6}
    async with gateway([upstream("p", limited)], traffic={"retry": retry}) as gw:
        outcomes = await asyncio.gather(*(ask(gw) for _ in range(20)))
    assert outcomes == ["ok"] * 20
    assert limited.stats()["rate_limited"] > 0  # the storm happened upstream...
    # ...and every retry waited for the window: no request needed more than two attempts.
    assert sim_requests(limited) <= 40


async def test_three_keys_triple_the_throughput_without_a_429(limited: SimHandle) -> None:
    limits = {"rpm": 10, "window_seconds": 1.0, "margin": 0.05}
    keys = ["sk-1", "sk-2", "sk-3"]
    async with gateway([upstream("p", limited, api_keys=keys, key_limits=limits)]) as gw:
        outcomes = await asyncio.gather(*(ask(gw) for _ in range(30)))
    assert outcomes == ["ok"] * 30
    by_key = limited.stats()["requests_by_key"]
    assert sorted(by_key.values()) == [10, 10, 10]
    assert limited.stats()["rate_limited"] <= 1


async def test_a_5xx_burst_loses_nothing_and_retries_stay_in_budget() -> None:
    faults = FaultSettings(error_rate=0.3)
    retry = {
        "budget_ratio": 0.2,
        "budget_min_per_second": 3,
        "budget_ttl_seconds": 10,
        "max_attempts": 8,
    }
    async with (
        run_simulator(SimSettings(port=0, seed=3, faults=faults)) as sim,
        gateway([upstream("p", sim)], traffic={"retry": retry}) as gw,
    ):
        outcomes = [await ask(gw) for _ in range(40)]
        attempts = sim_requests(sim)
    retries = attempts - 40
    assert sim.stats()["faults_total"] == retries  # every failure was retried...
    assert retries <= 0.2 * 40 + 3 * 10  # ...within the budget
    assert outcomes == ["ok"] * 40


async def test_a_hang_becomes_a_timeout_and_is_retried() -> None:
    async with (
        run_simulator(SimSettings(port=0, seed=5, faults=FaultSettings(hang_rate=0.3))) as sim,
        gateway([upstream("p", sim, timeouts={"ttfb": 0.3})]) as gw,
    ):
        outcomes = await asyncio.gather(*(ask(gw) for _ in range(10)))
    assert outcomes == ["ok"] * 10
    assert sim.stats()["faults_injected"].get("hang", 0) > 0


async def test_a_stream_cut_midway_is_not_retried_but_a_cut_body_is() -> None:
    faults = FaultSettings(disconnect_rate=1.0, disconnect_after_chunks=3)
    retry = {"budget_min_per_second": 5, "max_attempts": 8}
    async with (
        run_simulator(SimSettings(port=0, seed=2, faults=faults)) as sim,
        gateway([upstream("p", sim)], traffic={"retry": retry}) as gw,
    ):
        assert await ask(gw, stream=True) == "502"
        assert sim_requests(sim) == 1  # bytes had reached the client: no retry
        sim.configure({"faults": {"disconnect_rate": 0.3}})
        outcomes = [await ask(gw) for _ in range(10)]
    assert outcomes == ["ok"] * 10  # whole answers cut in transit are retried


async def test_a_dead_endpoint_is_ejected_and_readmitted_when_it_recovers() -> None:
    ejection = {"consecutive_failures": 2, "base_seconds": 0.3}
    retry = {"budget_min_per_second": 50, "base_seconds": 0.01}
    async with (
        run_simulator(SimSettings(port=0)) as a,
        run_simulator(SimSettings(port=0)) as b,
        run_simulator(SimSettings(port=0, faults=FaultSettings(error_rate=1.0))) as dead,
    ):
        ups = [upstream("a", a), upstream("b", b), upstream("dead", dead)]
        async with gateway(ups, traffic={"ejection": ejection, "retry": retry}) as gw:
            state = next(s for s in gw.pipeline.shared.traffic.group._members if s.name == "dead")
            outcomes = [await ask(gw) for _ in range(30)]
            assert outcomes == ["ok"] * 30
            assert state.health.ejections >= 1
            hits_while_dead = sim_requests(dead)
            assert hits_while_dead <= 2 + state.health.ejections  # threshold plus probes
            dead.configure({"faults": {"error_rate": 0.0}})
            await asyncio.sleep(state.health.ejected_until - gw.clock.now())
            for _ in range(30):
                await ask(gw)
            assert state.health.state(gw.clock.now()) is State.HEALTHY
            assert sim_requests(dead) > hits_while_dead + 1  # serving again, not just a probe


async def test_interactive_requests_overtake_a_batch_flood(limited: SimHandle) -> None:
    limits = {"rpm": 10, "window_seconds": 1.0, "burst": 0.0}
    done: list[str] = []

    async def tagged(gw: Gateway, name: str, priority: str) -> None:
        outcome = await ask(gw, headers={"x-levergate-priority": priority})
        done.append(name if outcome == "ok" else outcome)

    async with (
        gateway([upstream("p", limited, key_limits=limits)]) as gw,
        asyncio.TaskGroup() as tasks,
    ):
        for i in range(20):
            tasks.create_task(tagged(gw, f"batch{i}", "batch"))
        await asyncio.sleep(0.25)  # the flood is queued behind the limit
        for i in range(3):
            tasks.create_task(tagged(gw, f"interactive{i}", "interactive"))
    assert len(done) == 23
    last_interactive = max(i for i, name in enumerate(done) if name.startswith("interactive"))
    # Each interactive request waited at most for the request already at the head.
    assert last_interactive <= done.index("batch0") + 3 + 3


async def test_a_down_redis_falls_back_to_per_process_limits(limited: SimHandle) -> None:
    dead = {"default": {"redis_url": "redis://127.0.0.1:1/0"}}
    limits = {"rpm": 10, "window_seconds": 1.0, "margin": 0.05}
    async with gateway([upstream("p", limited, key_limits=limits)], stores=dead) as gw:
        outcomes = await asyncio.gather(*(ask(gw) for _ in range(15)))
        metrics = gw.pipeline.shared.traffic.metrics if gw.pipeline.shared.traffic else None
    assert outcomes == ["ok"] * 15
    assert metrics is not None
    assert sample_value(metrics.store_failovers) == 1
    assert limited.stats()["rate_limited"] <= 1
