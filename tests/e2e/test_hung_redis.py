"""A hung Redis under both shared stores, end to end (issue 10): the simulator <- levergate
(cache store and rate-limit store on a Redis that accepts and never answers) <- the OpenAI
SDK. Every request is answered; after the first timeouts no request waits on the hung server
during the cool-down, one trial per store goes after it, and both stores use Redis again once
it answers. Connections to the hung server are counted instead of measuring time; the
gateway runs on a `ManualClock`, so cool-downs end only when the test says so."""

from __future__ import annotations

import asyncio
import uuid

import openai
import redis.asyncio as aioredis

from levergate.config import Settings
from levergate.gateway import Gateway
from levergate.pipeline import Deps
from levergate.server.run import serving
from levergate.simulator import SimHandle
from levergate.testing import ManualClock
from tests.hung_redis import HungRedis
from tests.redis_required import require_redis

REDIS_URL = "redis://127.0.0.1:6379/0"
COOLDOWN = 30.0


async def test_a_hung_redis_costs_one_timeout_per_store_then_one_trial(sim: SimHandle) -> None:
    await require_redis(REDIS_URL)
    probe = aioredis.Redis.from_url(REDIS_URL, socket_connect_timeout=10)
    prefix = f"levergate:test:{uuid.uuid4().hex}:"
    limits_prefix = f"levergate:test:{{{uuid.uuid4().hex}}}:"
    hung, clock = HungRedis(), ManualClock()
    async with hung as url:
        settings = Settings.for_upstream(
            sim.base_url,
            server={"port": 0},
            stores={"default": {"redis_url": url}},
            cache={"store": {"redis_prefix": prefix,
                             "timeout_seconds": 1.0, "cooldown_seconds": COOLDOWN,
                             "front_bytes": 0}},
            traffic={"redis_prefix": limits_prefix,
                     "redis_timeout_seconds": 1.0, "redis_retry_seconds": COOLDOWN,
                     "tenant_default": {"rpm": 100_000}},
        )  # fmt: skip
        try:
            async with (
                Gateway(settings, deps=Deps(clock=clock)) as gateway,
                serving(gateway) as base,
                openai.AsyncOpenAI(base_url=base, api_key="-", max_retries=0) as client,
            ):

                async def ask(count: int) -> None:
                    questions = [f"question {uuid.uuid4().hex}" for _ in range(count)]
                    replies = await asyncio.gather(*(
                        client.chat.completions.create(
                            model="sim-small", max_tokens=4, temperature=0,
                            messages=[{"role": "user", "content": q}],
                        ) for q in questions
                    ))  # fmt: skip
                    assert all(r.choices[0].message.content for r in replies)

                await ask(1)  # waits out the limit check's timeout, then the cache's
                first = hung.connections
                assert first >= 2
                await ask(10)
                assert hung.connections == first  # cooling down: nobody waits on Redis
                clock.advance(COOLDOWN)
                await ask(10)
                assert hung.connections <= first + 2  # one trial per store, not one per call
                hung.relay = True
                clock.advance(COOLDOWN)
                await ask(1)  # the trials find Redis answering
                await ask(3)
            for used in (prefix, limits_prefix):  # both stores wrote to Redis again
                assert [k async for k in probe.scan_iter(match=used + "*")]
        finally:
            for match in (prefix + "*", limits_prefix + "*"):
                keys = [k async for k in probe.scan_iter(match=match)]
                if keys:
                    await probe.delete(*keys)
            await probe.aclose()
