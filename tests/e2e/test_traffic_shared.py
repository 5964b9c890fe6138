"""Limits shared by replicas through Redis, against the real simulator: two gateways in front of
one rate-limited key admit what one would; with per-process limits they would not. Also TPM:
tokens reserved before the call and corrected after keep a token-limited key free of 429s.

Needs Redis at 127.0.0.1:6379: skipped with a reason outside CI, a failure under CI=true."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from levergate.config import Settings
from levergate.errors import LevergateError
from levergate.gateway import Gateway
from levergate.simulator import LimitSettings, SimHandle, SimSettings, run_simulator
from tests.redis_required import require_redis

USER = [{"role": "user", "content": "Say something simulated."}]

REDIS_URL = "redis://127.0.0.1:6379/15"


@contextlib.asynccontextmanager
async def replicas(
    sim: SimHandle, count: int, *, traffic: dict[str, Any], limits: dict[str, Any]
) -> AsyncIterator[list[Gateway]]:
    settings = Settings.load(
        upstreams=[
            {"name": "p", "base_url": sim.base_url, "api_key": "sk-one", "key_limits": limits}
        ],
        models=[{"name": "m", "upstream": "p"}],
        cache={"enabled": False},
        traffic=traffic,
        stores={"default": {"redis_url": REDIS_URL}},
    )
    async with contextlib.AsyncExitStack() as stack:
        gateways = [await stack.enter_async_context(Gateway(settings)) for _ in range(count)]
        yield gateways


async def ask(gw: Gateway, **params: Any) -> str:
    try:
        await gw.chat(model="m", messages=USER, **params)
    except LevergateError as exc:
        return str(exc.http_status)
    return "ok"


@pytest.fixture
async def limited() -> AsyncIterator[SimHandle]:
    """A provider allowing 10 requests per key in any one-second window."""
    settings = SimSettings(port=0, limits=LimitSettings(rpm=10, window_seconds=1.0))
    async with run_simulator(settings) as handle:
        yield handle


async def test_two_replicas_share_one_limit_through_redis(limited: SimHandle) -> None:
    await require_redis(REDIS_URL)
    traffic = {"redis_prefix": f"t:{{{uuid.uuid4()}}}:"}
    limits = {"rpm": 10, "window_seconds": 1.0, "margin": 0.05}
    async with replicas(limited, 2, traffic=traffic, limits=limits) as (one, two):
        outcomes = await asyncio.gather(*(ask(gw, max_tokens=4) for gw in [one, two] * 15))
    assert outcomes == ["ok"] * 30
    # Two gateways, one limit: the provider refused (almost) nothing.
    assert limited.stats()["rate_limited"] <= 1


async def test_per_process_limits_would_overrun_the_provider(limited: SimHandle) -> None:
    limits = {"rpm": 10, "window_seconds": 1.0, "margin": 0.05}
    async with replicas(limited, 2, traffic={"store": "memory"}, limits=limits) as (one, two):
        outcomes = await asyncio.gather(*(ask(gw, max_tokens=4) for gw in [one, two] * 15))
    assert outcomes.count("ok") >= 25  # retries still deliver most of them...
    assert limited.stats()["rate_limited"] >= 5  # ...but each process spent the whole limit


async def test_a_token_limit_is_reserved_up_front_and_never_overrun() -> None:
    # 2,000 tokens per second per key; each call reserves its prompt plus a 200-token cap.
    settings = SimSettings(port=0, limits=LimitSettings(tpm=2000, window_seconds=1.0))
    async with run_simulator(settings) as sim:
        limits = {"tpm": 2000, "window_seconds": 1.0, "margin": 0.05, "token_burst": 0.25}
        async with replicas(sim, 1, traffic={}, limits=limits) as (gw,):
            outcomes = await asyncio.gather(*(ask(gw, max_tokens=200) for _ in range(24)))
        assert outcomes == ["ok"] * 24
        assert sim.stats()["rate_limited"] <= 1
