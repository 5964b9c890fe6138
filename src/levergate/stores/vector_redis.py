"""`SharedIndex`: the semantic cache's index shared by every gateway replica, on plain Redis.

The entries (question and answer) already live in the shared cache store; what a replica lacked
was the vectors of the answers other replicas stored. Redis vector search (`FT.SEARCH`) needs a
module that a stock Redis does not have, so the index is replicated instead of remote: a Redis
Stream (`<prefix>semantic:log`) is the log of every add and remove, and each replica keeps its
own in-process `PartitionedIndex` (numpy / HNSW) that follows the log. Search never leaves the
process, so it costs what it costs with `index: local`; only adds and removes travel.

- Start: the background job (`run`, a `Pipeline.background` job) reads the log from its first
  entry, rebuilding the index, and then blocks on `XREAD` for what other replicas append.
  Replaying and following are one loop: a read after the last id seen.
- Writes: `add` and `remove` change the local index at once and queue the operation; the same
  job sends the queue in pipelined `XADD` batches. A request never waits on Redis for its index
  write, and the queue is bounded (`_OUTBOX`; the oldest is dropped, counted).
- Echoes: every entry names the replica that wrote it, and a replica skips its own, which it
  applied already (re-adding would cost an HNSW graph a dead node per entry).
- Bound: `XADD ... MAXLEN ~ max_entries`: the log keeps about as many operations as the index
  keeps entries, so a replica started later rebuilds the newest ones (removes in the log make
  that a little fewer than `max_entries` adds; the ones lost are the oldest, next to be evicted
  anyway). At 384 dimensions an add takes ~1.9 KB of Redis memory (measured): ~190 MB at
  100k. Catching up reads `_BATCH` entries per round trip (20k entries replayed in 0.84 s on
  this machine); a partition crossing `hnsw_above` pauses the catch-up while its graph is
  built on a worker thread, while search keeps answering exactly.
- Consistency: a replica sees another's answer once its `XADD` and the next `XREAD` have come
  through (milliseconds on a LAN). Until then both may store an answer to the same question:
  two entries, never a wrong hit. Each replica evicts by its own bound and deletes the records
  only of what its own adds evicted; records that expire or are evicted elsewhere are dropped
  from an index lazily, when a lookup finds them gone (`cache_semantic`), and that drop is
  published like any remove.
- Failure: Redis down or slow costs sharing, never a request. Writes and reads are bounded by
  the store's timeout and fail into a counted fault (`levergate_cache_store_faults{store=
  "semantic_index"}`), logged once per cool-down; writes skip Redis for the cool-down, the
  follower retries with full-jitter backoff and resumes after the last id it applied. What was
  trimmed from the log meanwhile is not seen; the local index keeps answering throughout.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from levergate.config import CacheStoreSettings, SemanticCacheSettings
from levergate.core.clock import Clock
from levergate.policies.backoff import FullJitter
from levergate.stores.kv import FaultHook, StoreError
from levergate.stores.redis_calls import cancellation_kept
from levergate.stores.vector import PartitionedIndex, Vector

if TYPE_CHECKING:
    import redis.asyncio as aioredis
    from redis.typing import EncodableT, FieldT

log = logging.getLogger("levergate.cache")

STORE = "semantic_index"  # the `store` label of its fault counters
_BATCH = 256  # operations per XADD pipeline and per XREAD
_OUTBOX = 4096  # operations waiting to be sent; beyond it the oldest is dropped
_BLOCK_SECONDS = 1.0  # one XREAD waits this long for news before asking again
_RETRY = FullJitter(base=0.5, cap=30.0)  # the follower's wait after a failed read
_FLOAT32 = np.dtype("<f4")  # little-endian on the wire, whatever the replica's CPU


@dataclass(frozen=True, slots=True)
class Op:
    """One entry of the log. `vector` is float32 little-endian bytes (adds only); `source` is
    the writing replica's id."""

    kind: Literal["add", "remove"]
    partition: str
    key: str
    vector: bytes = b""
    source: str = ""

    def fields(self) -> dict[FieldT, EncodableT]:
        return {"op": self.kind, "p": self.partition, "k": self.key, "v": self.vector,
                "s": self.source}  # fmt: skip

    @classmethod
    def parse(cls, fields: dict[bytes, bytes]) -> Op | None:
        """The operation, or None for an entry this version cannot read."""
        kind = _KINDS.get(fields.get(b"op", b""))
        vector = fields.get(b"v", b"")
        try:
            partition, key, source = (fields.get(f, b"").decode() for f in (b"p", b"k", b"s"))
        except UnicodeDecodeError:
            return None
        if kind is None or not partition or not key:
            return None
        if kind == "add" and (not vector or len(vector) % _FLOAT32.itemsize):
            return None
        return cls(kind, partition, key, vector, source)


_KINDS: dict[bytes, Literal["add", "remove"]] = {b"add": "add", b"remove": "remove"}


def encode(vector: Sequence[float] | Vector) -> bytes:
    return np.asarray(vector, dtype=_FLOAT32).reshape(-1).tobytes()


def decode(data: bytes) -> Vector:
    return np.frombuffer(data, dtype=_FLOAT32).astype(np.float32)


class RedisLog:
    """The stream: batches appended, entries read after an id. Raises only `StoreError` (or
    `TimeoutError`); every call is bounded by `timeout` (a read by the block time plus it)."""

    def __init__(self, *, client: aioredis.Redis, key: str, max_len: int, timeout: float) -> None:
        """`client`'s pool may be shared (stores/registry.py): its socket timeout must stay
        above the blocking read's `_BLOCK_SECONDS` (a connection's is at least 2 s); the pool
        hands the blocking read a connection of its own, so it never holds up a write."""
        from redis.exceptions import RedisError

        self.key = key
        self._max_len = max_len
        self._timeout = timeout
        self._errors: tuple[type[BaseException], ...] = (RedisError, OSError)
        self._writer: aioredis.Redis = client
        self._reader: aioredis.Redis = client

    async def append(self, ops: Sequence[Op]) -> None:
        try:
            with cancellation_kept():
                async with asyncio.timeout(self._timeout):
                    pipe = self._writer.pipeline(transaction=False)
                    for op in ops:
                        pipe.xadd(self.key, op.fields(), maxlen=self._max_len, approximate=True)
                    await pipe.execute()
        except self._errors as exc:
            raise StoreError(f"redis: {exc}") from exc

    async def read(self, after: bytes) -> list[tuple[bytes, dict[bytes, bytes]]]:
        """Up to `_BATCH` entries after id `after`, waiting up to the block time for one."""
        try:
            with cancellation_kept():
                async with asyncio.timeout(_BLOCK_SECONDS + self._timeout):
                    reply: Any = await self._reader.xread(
                        {self.key: after}, count=_BATCH, block=int(_BLOCK_SECONDS * 1000)
                    )
        except self._errors as exc:
            raise StoreError(f"redis: {exc}") from exc
        return [(entry_id, fields) for _, entries in reply or [] for entry_id, fields in entries]

    async def aclose(self) -> None:
        await self._writer.aclose()


class SharedIndex:
    """A `PartitionedIndex` that follows, and writes to, a log shared by every replica."""

    def __init__(
        self,
        local: PartitionedIndex,
        *,
        log: RedisLog,
        cooldown: float,
        clock: Clock,
        rng: random.Random,
        on_fault: FaultHook,
    ) -> None:
        self._local = local
        self._log = log
        self._cooldown = cooldown
        self._clock = clock
        self._rng = rng
        self._on_fault = on_fault
        self.source = os.urandom(8).hex()
        self._outbox: deque[Op] = deque()
        self._queued = asyncio.Event()
        self._after = b"0-0"  # the id of the last log entry applied
        self._skip_until = float("-inf")  # writes skip Redis until then, after a failure
        self._quiet_until = float("-inf")  # no new warning until then

    def __len__(self) -> int:
        return len(self._local)

    async def add(self, partition: str, key: str, vector: Sequence[float] | Vector) -> list[str]:
        evicted = await self._local.add(partition, key, vector)
        self._send(Op("add", partition, key, encode(vector), self.source))
        return evicted

    async def search(
        self, partition: str, vector: Sequence[float] | Vector, k: int
    ) -> list[tuple[str, float]]:
        return await self._local.search(partition, vector, k)

    async def remove(self, partition: str, key: str) -> None:
        await self._local.remove(partition, key)
        self._send(Op("remove", partition, key, source=self.source))

    async def run(self) -> None:
        """Rebuild from the log, then follow it and send local changes, until cancelled."""
        async with asyncio.TaskGroup() as jobs:
            jobs.create_task(self._follow())
            jobs.create_task(self._publish())

    async def aclose(self) -> None:
        """Send what is still queued (one try, bounded by the timeout), then disconnect."""
        if self._outbox and self._clock.now() >= self._skip_until:
            await self._flush()
        await self._log.aclose()

    def _send(self, op: Op) -> None:
        if len(self._outbox) >= _OUTBOX:
            self._outbox.popleft()
            self._on_fault(STORE, "publish", "overflow")
        self._outbox.append(op)
        self._queued.set()

    async def _publish(self) -> None:
        while True:
            await self._queued.wait()
            self._queued.clear()
            if self._clock.now() < self._skip_until:
                # Dropped, not kept: the entries were most likely not stored in Redis either.
                self._on_fault(STORE, "publish", "cooling_down")
                self._outbox.clear()
                continue
            await self._flush()

    async def _flush(self) -> None:
        while self._outbox:
            batch = [self._outbox.popleft() for _ in range(min(_BATCH, len(self._outbox)))]
            try:
                await self._log.append(batch)
            except (StoreError, TimeoutError) as exc:
                self._failed("publish", exc)
                self._skip_until = self._clock.now() + self._cooldown
                self._outbox.clear()
                return

    async def _follow(self) -> None:
        failures = 0
        while True:
            try:
                entries = await self._log.read(self._after)
            except (StoreError, TimeoutError) as exc:
                self._failed("read", exc)
                await self._clock.sleep(_RETRY.delay(failures, rng=self._rng))
                failures += 1
                continue
            if failures:
                log.warning("semantic index: following the shared log in Redis again")
                failures = 0
            await self._apply(entries)

    async def _apply(self, entries: list[tuple[bytes, dict[bytes, bytes]]]) -> None:
        for entry_id, fields in entries:
            self._after = entry_id
            op = Op.parse(fields)
            if op is None:
                self._on_fault(STORE, "apply", "corrupt")
                continue
            if op.source == self.source:
                continue
            if op.kind == "remove":
                await self._local.remove(op.partition, op.key)
                continue
            try:
                # What this add evicts leaves this replica's index only: the records belong
                # to the replica that stored them, which evicts by the same bound.
                await self._local.add(op.partition, op.key, decode(op.vector))
            except ValueError as exc:  # a vector of another size: a replica's embedder differs
                self._failed("apply", exc)

    def _failed(self, op: str, exc: BaseException) -> None:
        reason = "timeout" if isinstance(exc, TimeoutError) else "error"
        self._on_fault(STORE, op, reason)
        now = self._clock.now()
        if now < self._quiet_until:
            return
        # Once per cool-down: a dead Redis must not flood the log at request rate.
        self._quiet_until = now + self._cooldown
        log.warning(
            "semantic index: the shared log in Redis failed on %s (%s: %s); searching the "
            "local index only until it answers again", op, type(exc).__name__, exc or reason,
        )  # fmt: skip


def connect(
    local: PartitionedIndex,
    *,
    client: aioredis.Redis,
    store: CacheStoreSettings,
    options: SemanticCacheSettings,
    clock: Clock,
    on_fault: FaultHook,
) -> SharedIndex:
    """The shared index on `client` (the cache store's Redis, or the deprecated
    `index_redis_url`'s); nothing connects until used. The key prefix defaults to the cache
    store's, and so do timeout and cool-down."""
    prefix = (
        store.redis_prefix if options.index_redis_prefix is None else options.index_redis_prefix
    )
    redis_log = RedisLog(client=client, key=f"{prefix}semantic:log",
                         max_len=options.max_entries, timeout=store.timeout_seconds)  # fmt: skip
    return SharedIndex(
        local, log=redis_log, cooldown=store.cooldown_seconds, clock=clock,
        rng=random.Random(), on_fault=on_fault,  # noqa: S311 - jitter, not secrets
    )  # fmt: skip
