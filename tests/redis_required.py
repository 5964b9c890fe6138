"""The one rule for tests that need Redis: outside CI a missing Redis skips them with a reason;
under CI=true (where .ci/run starts Redis) it fails them, so a skip never hides a lost test."""

from __future__ import annotations

import os

import pytest
from redis.asyncio import Redis


async def require_redis(url: str) -> None:
    client = Redis.from_url(url, socket_connect_timeout=1)
    try:
        await client.ping()
    except Exception as exc:  # any failure to reach it: refused, timeout, auth
        if os.environ.get("CI") == "true":
            pytest.fail(f"Redis is required under CI and is not reachable at {url}: {exc}")
        pytest.skip(f"Redis not reachable at {url}: {exc}")
    finally:
        await client.aclose()
