"""Active health checks against real sockets on loopback, the probes' schedule driven by a
manual clock: a dead endpoint (nothing listening) and a hung one (accepts, never answers) are
ejected with no client traffic at all, get no requests while out, and a dead one is readmitted
once a simulator listens on its port again. Assertions are about which endpoint served what,
never about how long anything took."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

from levergate.config import Settings
from levergate.gateway import Gateway
from levergate.pipeline import Deps
from levergate.policies.ejection import State
from levergate.simulator import SimHandle, SimSettings, run_simulator
from levergate.testing import ManualClock, sample_value
from levergate.testing.ports import free_port
from levergate.upstreams.client import client_for
from levergate.upstreams.probe import HttpProbe
from tests.e2e.test_traffic_faults import ask, sim_requests, upstream

INTERVAL = 1.0
CHECKS = {
    "enabled": True,
    "interval_seconds": INTERVAL,
    "timeout_seconds": 0.3,  # real seconds: only the hung endpoint's probes wait for it
    "jitter": 0.0,
    "unhealthy_threshold": 2,
    "healthy_threshold": 2,
}


@contextlib.asynccontextmanager
async def hung_server() -> AsyncIterator[str]:
    """Accepts connections and reads requests, but never answers."""

    async def swallow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while await reader.read(4096):
                pass
        writer.close()

    server = await asyncio.start_server(swallow, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.close()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(2):
                await server.wait_closed()


class Checked:
    """A gateway whose health checks run on a manual clock, one round per `round()`."""

    def __init__(self, gw: Gateway, clock: ManualClock) -> None:
        assert gw.pipeline.shared.traffic is not None
        self.gw = gw
        self.clock = clock
        self.traffic = gw.pipeline.shared.traffic
        self.rounds = 1  # the first probes run at startup

    def state(self, name: str) -> State:
        found = next(s for s in self.traffic.group._members if s.name == name)
        return found.health.state(self.clock.now())

    def probes(self, name: str) -> float:
        checks = self.traffic.metrics.health_checks
        return sum(float(sample_value(checks, name, o)) for o in ("pass", "fail"))

    def attempts(self, name: str) -> float:
        attempts = self.traffic.metrics.attempts
        outcomes = ("ok", "rejected", "failed")
        return sum(float(sample_value(attempts, name, o)) for o in outcomes)

    async def settled(self, names: Sequence[str]) -> None:
        """Wait (in real time: probes are real requests) for this round's probes to finish."""
        while any(self.probes(name) < self.rounds for name in names):
            await asyncio.sleep(0.01)

    async def round(self, names: Sequence[str], count: int = 1) -> None:
        for _ in range(count):
            self.clock.advance(INTERVAL)
            self.rounds += 1
            await self.settled(names)


@contextlib.asynccontextmanager
async def checked(upstreams: Sequence[dict[str, Any]]) -> AsyncIterator[Checked]:
    settings = Settings.load(
        upstreams=list(upstreams),
        models=[{"name": "m", "endpoints": [{"upstream": u["name"]} for u in upstreams]}],
        traffic={
            "seed": 1,
            "health_checks": CHECKS,
            "ejection": {"base_seconds": 2.0},
            "balance": {"strategy": "weighted"},
        },
    )
    clock = ManualClock()
    async with Gateway(settings, deps=Deps(clock=clock)) as gw:
        checks = Checked(gw, clock)
        await checks.settled([u["name"] for u in upstreams])
        yield checks


async def test_a_dead_endpoint_is_ejected_by_probes_alone_and_readmitted_when_it_recovers() -> None:
    port = free_port()  # nothing listens here: connections are refused
    names = ["a", "b", "dead"]
    async with run_simulator(SimSettings(port=0)) as a, run_simulator(SimSettings(port=0)) as b:
        ups = [upstream("a", a), upstream("b", b), upstream("dead", f"http://127.0.0.1:{port}/v1")]
        async with checked(ups) as checks:
            assert checks.state("dead") is State.HEALTHY  # one failed probe is no verdict
            await checks.round(names)
            assert checks.state("dead") is State.EJECTED
            assert sim_requests(a) + sim_requests(b) == 0  # no client traffic was needed
            # Out, and held out well past its 2 s ejection while its probes fail.
            for _ in range(5):
                assert [await ask(checks.gw) for _ in range(6)] == ["ok"] * 6
                await checks.round(names)
                assert checks.state("dead") is State.EJECTED
            assert checks.attempts("dead") == 0
            assert sim_requests(a) + sim_requests(b) == 30
            async with run_simulator(SimSettings(), port=port) as revived:
                await checks.round(names)
                assert checks.state("dead") is State.EJECTED  # one pass is no verdict
                await checks.round(names)
                assert checks.state("dead") is State.HEALTHY
                assert [await ask(checks.gw) for _ in range(30)] == ["ok"] * 30
                assert sim_requests(revived) > 0  # readmitted without a half-open probe first
    metrics = checks.traffic.metrics
    assert sample_value(metrics.ejections, "dead") == 1
    assert sample_value(metrics.ejected, "dead") == 0


async def test_a_hung_endpoint_is_ejected_by_probe_timeouts() -> None:
    names = ["a", "b", "hung"]
    async with (
        run_simulator(SimSettings(port=0)) as a,
        run_simulator(SimSettings(port=0)) as b,
        hung_server() as hung,
    ):
        ups = [upstream("a", a), upstream("b", b), upstream("hung", hung)]
        async with checked(ups) as checks:
            await checks.round(names)
            assert checks.state("hung") is State.EJECTED
            assert [await ask(checks.gw) for _ in range(20)] == ["ok"] * 20
            assert checks.attempts("hung") == 0
            assert sample_value(checks.traffic.metrics.health_checks, "hung", "fail") == 2


async def test_a_probe_tells_up_from_down_on_real_sockets(sim: SimHandle) -> None:
    settings = Settings.load(upstreams=[upstream("p", sim)]).upstreams[0]
    assert settings.kind == "openai"
    dead_url = f"http://127.0.0.1:{free_port()}/v1"
    probes = {
        "up": HttpProbe.of(settings, None, path="/models", timeout=2.0, http_client=client_for),
        "missing": HttpProbe.of(settings, None, path="/nope", timeout=2.0, http_client=client_for),
        "dead": HttpProbe.of(
            settings.model_copy(update={"base_url": dead_url}),
            None,
            path="/models",
            timeout=2.0,
            http_client=client_for,
        ),
    }
    try:
        found = {name: await probe() for name, probe in probes.items()}
    finally:
        for probe in probes.values():
            await probe.aclose()
    assert found["up"] is None
    assert found["missing"] == "answered HTTP 404"
    assert (found["dead"] or "").startswith("unreachable")
    assert sim.stats()["requests_by_endpoint"].get("/v1/models") == 1
