"""SharedIndex: the semantic index replicated between gateway replicas through a Redis Stream.
Each "replica" here is one SharedIndex on the same real Redis (127.0.0.1:6379): skipped with a
reason outside CI, a failure under CI=true. Propagation is waited for with a bounded poll, never
asserted as a time."""

from __future__ import annotations

import asyncio
import logging
import math
import random
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest
from redis.asyncio import Redis

from levergate.core.clock import SystemClock
from levergate.layers.cache.stats import CacheStats
from levergate.stores.redis_calls import redis_client
from levergate.stores.vector import PartitionedIndex
from levergate.stores.vector_redis import STORE, Op, RedisLog, SharedIndex, decode, encode
from levergate.testing import sample_value
from tests.redis_required import require_redis

REDIS_URL = "redis://127.0.0.1:6379/15"
CLOSED_PORT_URL = "redis://127.0.0.1:1/0"  # nothing listens on port 1: connections are refused
NORTH, EAST, UP = [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]


@pytest.fixture
async def key() -> AsyncIterator[str]:
    await require_redis(REDIS_URL)
    key = f"levergate:test:{uuid.uuid4().hex}:semantic:log"
    yield key
    client = Redis.from_url(REDIS_URL)
    await client.delete(key)
    await client.aclose()


def replica(
    key: str,
    *,
    stats: CacheStats | None = None,
    url: str = REDIS_URL,
    max_entries: int = 100,
    timeout: float = 1.0,
    cooldown: float = 1.0,
) -> SharedIndex:
    stats = stats or CacheStats()
    client = redis_client(url=url, timeout=max(timeout, 2.0), what="test")
    log = RedisLog(client=client, key=key, max_len=max_entries, timeout=timeout)
    local = PartitionedIndex(max_entries=max_entries, hnsw_above=1000)
    return SharedIndex(
        local, log=log, cooldown=cooldown, clock=SystemClock(), rng=random.Random(0),
        on_fault=stats.fault,
    )  # fmt: skip


@asynccontextmanager
async def running(*indexes: SharedIndex) -> AsyncIterator[None]:
    """The replicas' background jobs, as `Gateway` runs them: cancelled, then closed."""
    jobs = [asyncio.ensure_future(index.run()) for index in indexes]
    try:
        yield
    finally:
        for job in jobs:
            job.cancel()
        await asyncio.gather(*jobs, return_exceptions=True)
        for index in indexes:
            await index.aclose()


async def eventually(condition: Callable[[], Awaitable[bool]], *, within: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not await condition():
        assert loop.time() < deadline, "the replicas did not converge"
        await asyncio.sleep(0.01)


def finds(
    index: SharedIndex, partition: str, vector: list[float], key: str
) -> Callable[[], Awaitable[bool]]:
    """A condition: `key` is the nearest neighbour of `vector` in `partition` of `index`."""

    async def check() -> bool:
        return [k for k, _ in await index.search(partition, vector, 4)][:1] == [key]

    return check


def angle(radians: float) -> list[float]:
    return [math.cos(radians), math.sin(radians), 0.0]


def faults(stats: CacheStats, op: str, reason: str) -> float:
    return float(sample_value(stats.faults, STORE, op, reason))


def test_an_operation_survives_the_wire() -> None:
    op = Op("add", "part", "sem:k", encode([0.5, -1.0, 2.0]), "src")
    # As redis-py hands them back: every name and value as bytes.
    wire = {str(k).encode(): v if isinstance(v, bytes) else str(v).encode()
            for k, v in op.fields().items()}  # fmt: skip
    assert Op.parse(wire) == op
    assert decode(op.vector).tolist() == [0.5, -1.0, 2.0]
    assert Op.parse({b"op": b"add", b"p": b"part", b"k": b"sem:k", b"v": b"abc"}) is None
    assert Op.parse({b"op": b"drop", b"p": b"part", b"k": b"sem:k"}) is None
    assert Op.parse({b"op": b"remove", b"p": b"\xff", b"k": b"sem:k"}) is None


async def test_an_add_on_one_replica_is_found_on_another_and_a_remove_follows(key: str) -> None:
    one, two = replica(key), replica(key)
    async with running(one, two):
        await one.add("p", "sem:a", NORTH)
        await eventually(finds(two, "p", NORTH, "sem:a"))
        assert await two.search("other", NORTH, 4) == []  # partitions stay apart
        await two.remove("p", "sem:a")
        await eventually(lambda: _empty(one, "p", NORTH))
        await one.add("p", "sem:b", EAST)  # once this arrives, so has everything before it
        await eventually(finds(two, "p", EAST, "sem:b"))
        assert len(one) == len(two) == 1


async def _empty(index: SharedIndex, partition: str, vector: list[float]) -> bool:
    return await index.search(partition, vector, 4) == []


async def test_a_replica_started_later_rebuilds_from_the_log(key: str) -> None:
    one = replica(key)
    async with running(one):
        await one.add("p", "sem:north", NORTH)
        await one.add("p", "sem:east", EAST)
        await one.add("q", "sem:up", UP)
        await one.remove("p", "sem:east")
        late = replica(key)
        async with running(late):
            await eventually(finds(late, "q", UP, "sem:up"))
            await eventually(finds(late, "p", NORTH, "sem:north"))
            assert [k for k, _ in await late.search("p", EAST, 4)] == ["sem:north"]
            assert len(late) == 2


async def test_the_log_is_trimmed_to_about_max_entries(key: str) -> None:
    writer, reader = replica(key, max_entries=10), replica(key, max_entries=10)
    async with running(writer, reader):
        for i in range(500):
            await writer.add("p", f"sem:{i}", angle(i / 100))
        await eventually(finds(reader, "p", angle(4.99), "sem:499"))
        assert len(reader) == len(writer) == 10
        client = Redis.from_url(REDIS_URL)
        length = await client.xlen(key)
        await client.aclose()
    # MAXLEN ~ trims whole stream nodes (100 entries each by default): at least 10 remain.
    assert 10 <= length <= 200


async def test_an_unreadable_entry_is_counted_and_skipped(key: str) -> None:
    stats = CacheStats()
    one, two = replica(key), replica(key, stats=stats)
    client = Redis.from_url(REDIS_URL)
    await client.xadd(key, {"op": "add", "p": "p", "k": "sem:bad", "v": b"abc"})
    await client.aclose()
    async with running(one, two):
        await one.add("p", "sem:good", NORTH)
        await eventually(finds(two, "p", NORTH, "sem:good"))
    assert faults(stats, "apply", "corrupt") == 1
    assert len(two) == 1


async def test_a_redis_that_is_down_costs_the_sharing_never_an_answer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stats = CacheStats()
    alone = replica(
        "levergate:test:down", url=CLOSED_PORT_URL, stats=stats, timeout=0.2, cooldown=60.0
    )
    with caplog.at_level(logging.WARNING, logger="levergate.cache"):
        async with running(alone):
            for i in range(5):
                await alone.add("p", f"sem:{i}", [1.0, float(i), 0.0])
                await asyncio.sleep(0.01)
            await alone.remove("p", "sem:4")
            assert [k for k, _ in await alone.search("p", NORTH, 1)] == ["sem:0"]
            assert len(alone) == 4

            async def counted() -> bool:
                return (
                    faults(stats, "read", "error") >= 2 and faults(stats, "publish", "error") == 1
                )

            await eventually(counted)
    # The first failed write starts the cool-down; what is written during it is dropped, counted.
    assert faults(stats, "publish", "cooling_down") >= 1
    warnings = [r for r in caplog.records if r.name == "levergate.cache"]
    assert len(warnings) == 1  # once per cool-down, whatever the number of failures


class Outage:
    """A loopback TCP relay to Redis that can be cut and restored on the same port."""

    def __init__(self) -> None:
        self.port = 0
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.StreamWriter] = set()

    async def restore(self) -> None:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def cut(self) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._open):
            writer.close()
        await self._server.wait_closed()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", 6379)
        self._open |= {writer, up_writer}
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(1 << 16):
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            self._open.discard(writer)
            writer.close()


async def test_after_an_outage_a_replica_catches_up_and_shares_again(key: str) -> None:
    outage = Outage()
    await outage.restore()
    stats = CacheStats()
    cut_off = replica(key, url=f"redis://127.0.0.1:{outage.port}/15", stats=stats, cooldown=0.2)
    direct = replica(key)
    try:
        async with running(cut_off, direct):
            await cut_off.add("p", "sem:before", NORTH)
            await eventually(finds(direct, "p", NORTH, "sem:before"))
            await outage.cut()
            await direct.add("q", "sem:during", EAST)
            await eventually(lambda: _faulted(stats))
            await outage.restore()
            # The follower resumes after the last entry it applied: what it missed arrives.
            await eventually(finds(cut_off, "q", EAST, "sem:during"))

            async def shared_again() -> bool:  # the writer's cool-down may still be running
                await cut_off.add("r", "sem:after", UP)
                return await finds(direct, "r", UP, "sem:after")()

            await eventually(shared_again)
    finally:
        await outage.cut()


async def _faulted(stats: CacheStats) -> bool:
    return faults(stats, "read", "error") >= 1


async def test_the_job_stops_when_cancelled_whatever_it_is_waiting_on(key: str) -> None:
    # redis-py can swallow a cancel that lands inside a command; the job must stop anyway, or
    # the gateway's shutdown would wait for it forever.
    index = replica(key, timeout=0.1)
    rng = random.Random(7)
    for i in range(50):
        job = asyncio.ensure_future(index.run())
        await index.add("p", f"sem:{i}", angle(i / 10))
        await asyncio.sleep(rng.uniform(0, 0.003))
        job.cancel()
        done, _ = await asyncio.wait([job], timeout=5)
        assert done, "the job ignored its cancellation"
    await index.aclose()
