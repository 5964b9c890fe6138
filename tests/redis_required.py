"""The one rule for tests that need Redis: outside CI a missing Redis skips them with a reason;
under CI=true (where .ci/run starts Redis) it fails them, so a skip never hides a lost test."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable

from redis.asyncio import Redis

from tests.required import missing


async def require_redis(url: str) -> None:
    client = Redis.from_url(url, socket_connect_timeout=10)
    try:
        await client.ping()
    except Exception as exc:  # any failure to reach it: refused, timeout, auth
        missing(f"Redis not reachable at {url}: {exc}")
    finally:
        await client.aclose()


async def swallowed_cancellations(
    call: Callable[[], Awaitable[object]], *, seed: int, rounds: int = 200
) -> int:
    """How many of `rounds` calls, each cancelled a random moment after it started, did not
    end cancelled (redis-py with a socket timeout can swallow a cancel inside a command)."""
    rng = random.Random(seed)
    swallowed = 0
    for _ in range(rounds):
        task = asyncio.ensure_future(call())
        await asyncio.sleep(rng.uniform(0, 0.0005))
        if task.done():
            continue
        task.cancel()
        await asyncio.wait([task])
        swallowed += not task.cancelled()
    return swallowed
