"""`Supervisor`: a background job that crashes is logged, counted and restarted with capped
exponential backoff on the injected clock; one that returns is done; cancelling stops it."""

from __future__ import annotations

import asyncio
import logging

import pytest
from prometheus_client import CollectorRegistry

from levergate.core.jobs import BackgroundJob, Supervisor
from levergate.testing import ManualClock
from tests.unit.layers.traffic.fakes import settle


def supervisor(clock: ManualClock, registry: CollectorRegistry) -> Supervisor:
    return Supervisor(base_seconds=1.0, cap_seconds=8.0, clock=clock, registry=registry)


def crashes(registry: CollectorRegistry, job: str) -> float | None:
    return registry.get_sample_value("levergate_background_crashes_total", {"job": job})


async def test_a_job_that_raises_twice_is_restarted_and_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock, registry = ManualClock(), CollectorRegistry()
    runs: list[float] = []
    running = asyncio.Event()

    async def flaky() -> None:
        runs.append(clock.now())
        if len(runs) <= 2:
            raise RuntimeError(f"crash {len(runs)}")
        running.set()
        await asyncio.Event().wait()

    with caplog.at_level(logging.ERROR, logger="levergate.core.jobs"):
        task = asyncio.create_task(
            supervisor(clock, registry).keep_running(BackgroundJob("flaky", flaky))
        )
        await settle()
        assert runs == [0.0]
        clock.advance(1.0)  # first restart after base_seconds
        await settle()
        assert runs == [0.0, 1.0]
        clock.advance(1.0)
        await settle()
        assert len(runs) == 2  # the second wait is twice as long
        clock.advance(1.0)
        await settle()
        assert runs == [0.0, 1.0, 3.0]
        assert running.is_set()
    assert crashes(registry, "flaky") == 2
    logged = [r for r in caplog.records if "flaky" in r.getMessage()]
    assert len(logged) == 2  # once per crash, with its traceback
    assert all(r.exc_info for r in logged)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_the_backoff_doubles_up_to_its_cap() -> None:
    s = supervisor(ManualClock(), CollectorRegistry())
    assert [s.delay(n) for n in range(1, 7)] == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]


async def test_a_job_that_returns_is_not_restarted() -> None:
    clock, registry = ManualClock(), CollectorRegistry()
    runs = []

    async def once() -> None:
        runs.append(1)

    await supervisor(clock, registry).keep_running(BackgroundJob("once", once))
    assert runs == [1]
    assert not crashes(registry, "once")


async def test_a_crashing_job_of_a_gateway_shows_in_its_metrics() -> None:
    from prometheus_client import generate_latest

    from levergate.config import Settings
    from levergate.gateway import Gateway
    from levergate.pipeline import Deps

    clock = ManualClock()
    gateway = Gateway(Settings.for_upstream("http://127.0.0.1:9/v1"), deps=Deps(clock=clock))

    async def broken() -> None:
        raise OSError("the index's Redis is gone")

    gateway.pipeline.background.append(BackgroundJob("semantic_index", broken))
    async with gateway:
        await settle()
        clock.advance(1.0)
        await settle()
        text = generate_latest(gateway.pipeline.telemetry.registry).decode()
    assert 'levergate_background_crashes_total{job="semantic_index"} 2.0' in text
