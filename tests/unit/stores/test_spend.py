"""The spend stores: per key, per UTC day and month, summed exactly across replicas (Redis).
The Redis cases need Redis at 127.0.0.1:6379: skipped with a reason outside CI, failed under CI."""

from __future__ import annotations

import asyncio
import calendar
import datetime as dt
import math
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from redis.asyncio import Redis

from levergate.stores.redis_calls import redis_client
from levergate.stores.spend import MemorySpendStore, Periods, RedisSpendStore, SpendStore
from levergate.stores.spend_sqlite import SqliteSpendStore
from tests.redis_required import require_redis

REDIS_URL = "redis://127.0.0.1:6379/15"
DEC_31 = dt.datetime(2026, 12, 31, 23, 59, tzinfo=dt.UTC).timestamp()


@pytest.fixture(params=["memory", "sqlite", "redis"])
async def spend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SpendStore]:
    made: MemorySpendStore | SqliteSpendStore | RedisSpendStore
    if request.param == "memory":
        made = MemorySpendStore()
    elif request.param == "sqlite":
        made = SqliteSpendStore(tmp_path / "keys.sqlite3", busy_timeout=1.0)
    else:
        await require_redis(REDIS_URL)
        client = redis_client(url=REDIS_URL, timeout=1.0, what="test")
        made = RedisSpendStore(client, prefix=f"test:{uuid.uuid4().hex}:", timeout=1.0)
    yield made
    await made.aclose()


async def test_spend_adds_up_per_day_and_month_and_per_key(spend: SpendStore) -> None:
    today = Periods.at(DEC_31 - 86_400)
    await spend.add("k1", 0.25, today)
    await spend.add("k1", 0.5, today)
    await spend.add("k2", 9.0, today)
    assert (await spend.spent("k1", today)).day == pytest.approx(0.75)
    tomorrow = Periods.at(DEC_31)
    await spend.add("k1", 1.0, tomorrow)
    spent = await spend.spent("k1", tomorrow)
    assert spent.day == pytest.approx(1.0)
    assert spent.month == pytest.approx(1.75)
    new_year = Periods.at(DEC_31 + 120)
    assert (await spend.spent("k1", new_year)).month == 0.0


async def test_concurrent_charges_from_two_replicas_sum_exactly() -> None:
    await require_redis(REDIS_URL)
    prefix = f"test:{uuid.uuid4().hex}:"
    stores = [RedisSpendStore(redis_client(url=REDIS_URL, timeout=1, what="t"), prefix=prefix,
                              timeout=1.0) for _ in range(2)]  # fmt: skip
    now = Periods.at(time.time())  # Redis expires counters by its own clock
    await asyncio.gather(*(s.add("k", 0.125, now) for s in stores for _ in range(40)))
    assert (await stores[0].spent("k", now)).month == 10.0
    raw = Redis.from_url(REDIS_URL)
    ttl = await raw.ttl(f"{prefix}{{k}}:d:{now.day}")
    await raw.aclose()
    assert 0 < ttl <= 86_400 * 2
    for store in stores:
        await store.aclose()


async def test_two_processes_charging_one_sqlite_file_sum_exactly(tmp_path: Path) -> None:
    stores = [SqliteSpendStore(tmp_path / "s.sqlite3", busy_timeout=5.0) for _ in range(2)]
    now = Periods.at(DEC_31)
    await asyncio.gather(*(s.add("k", 0.125, now) for s in stores for _ in range(40)))
    assert (await stores[1].spent("k", now)).day == 10.0
    for store in stores:
        await store.aclose()


@given(st.floats(min_value=0, max_value=4_102_444_800))
def test_a_moment_lies_inside_its_day_and_month(unix: float) -> None:
    periods = Periods.at(unix)
    moment = dt.datetime.fromtimestamp(math.floor(unix), tz=dt.UTC)
    assert periods.day_ends - 86_400 <= unix < periods.day_ends
    days = calendar.monthrange(moment.year, moment.month)[1]
    assert periods.month_ends - days * 86_400 <= unix < periods.month_ends
    assert periods.day == moment.strftime("%Y-%m-%d")
    assert periods.month == moment.strftime("%Y-%m")
