"""`/readyz` on a real server in front of real sockets: 503 when the only upstream refuses
connections (found by the health checks with no client traffic, or by the requests that failed
on it), 200 again once it listens; with two aliases, one dead, `degraded` or 503 by the mode.
Every wait polls for a state; nothing asserts how long it took."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from levergate.simulator import SimSettings, run_simulator
from levergate.testing.ports import free_port
from tests.e2e.conftest import GatewayFactory

CHECKS = {"enabled": True, "interval_seconds": 0.05, "timeout_seconds": 1.0, "jitter": 0.0,
          "unhealthy_threshold": 1, "healthy_threshold": 1}  # fmt: skip
PATIENCE = 30.0  # seconds a state may take to show up on a busy machine


async def ready_state(root: str, status: int) -> dict[str, Any]:
    """Poll /readyz until it answers `status`; its body."""
    async with httpx.AsyncClient() as http:
        async with asyncio.timeout(PATIENCE):
            while True:
                answer = await http.get(f"{root}/readyz")
                if answer.status_code == status:
                    body: dict[str, Any] = answer.json()
                    return body
                await asyncio.sleep(0.05)


def upstreams(*ports: int) -> list[dict[str, Any]]:
    return [{"name": f"u{p}", "base_url": f"http://127.0.0.1:{p}/v1"} for p in ports]


async def test_the_only_upstream_refusing_connections_makes_the_gateway_unready(
    gateway_for: GatewayFactory,
) -> None:
    port = free_port()  # nothing listens here yet
    models = [{"name": "m", "upstream": f"u{port}"}]
    async with gateway_for(upstreams=upstreams(port), models=models,
                           traffic={"health_checks": CHECKS}) as url:  # fmt: skip
        root = url.removesuffix("/v1")
        body = await ready_state(root, 503)
        assert body == {"status": "unavailable", "unavailable": ["m"]}
        async with httpx.AsyncClient() as http:  # liveness is not readiness
            assert (await http.get(f"{root}/healthz")).status_code == 200
        async with run_simulator(SimSettings(), port=port):
            assert await ready_state(root, 200) == {"status": "ok"}


async def test_without_health_checks_the_failed_requests_eject_it_and_readiness_follows(
    gateway_for: GatewayFactory,
) -> None:
    port = free_port()
    traffic = {"retry": {"enabled": False}, "ejection": {"consecutive_failures": 2}}
    models = [{"name": "m", "upstream": f"u{port}"}]
    async with gateway_for(upstreams=upstreams(port), models=models, traffic=traffic) as url:
        root = url.removesuffix("/v1")
        async with httpx.AsyncClient() as http:
            assert (await http.get(f"{root}/readyz")).json() == {"status": "ok"}
            body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
            for _ in range(2):
                failed = await http.post(f"{url}/chat/completions", json=body)
                assert failed.status_code >= 500
            answer = await http.get(f"{root}/readyz")
        assert answer.status_code == 503
        assert answer.json() == {"status": "unavailable", "unavailable": ["m"]}


async def test_one_dead_alias_of_two_is_degraded_or_unready_by_the_mode(
    gateway_for: GatewayFactory,
) -> None:
    dead = free_port()
    async with run_simulator(SimSettings()) as sim:
        live = sim.port
        models = [{"name": "up", "upstream": f"u{live}"}, {"name": "down", "upstream": f"u{dead}"}]
        for mode, status, state in (("any_model", 200, "degraded"),
                                    ("every_model", 503, "unavailable")):  # fmt: skip
            async with gateway_for(upstreams=upstreams(live, dead), models=models,
                                   traffic={"health_checks": CHECKS},
                                   server={"readiness": mode}) as url:  # fmt: skip
                body = await ready_state(url.removesuffix("/v1"), status)
                assert body == {"status": state, "unavailable": ["down"]}
