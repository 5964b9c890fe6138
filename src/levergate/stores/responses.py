"""`ResponseStore`: the responses levergate keeps for `previous_response_id`, `GET` and `DELETE
/v1/responses/{id}`, each owned by the tenant that made it.

Where in the stack: the Responses bridge (layers/responses.py) saves every stored response when
it completes and loads the one a request continues; the edge's GET / DELETE handlers read and
drop them. A translated response is kept whole with its conversation (every earlier item, this
turn's input, its output), so continuing it is one read, however long the chain; a response
passed through natively is kept too (the upstream holds the conversation; the record says who
owns the id, so another tenant naming it gets a 404 before anything is sent upstream).

Over the `KV` seam (stores/kv.py): memory, SQLite or Redis, chosen by `build_response_store`
(config/responses.py says how `auto` decides). Unlike a cache, a store failure is not a miss:
a conversation that cannot be read must fail its request (503), never start over silently.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from levergate.config import ResponsesSettings, Settings
from levergate.core.clock import Clock
from levergate.errors import Overloaded
from levergate.stores.kv import KV, StoreError
from levergate.stores.kv_memory import MemoryKV


@dataclass(frozen=True, slots=True)
class StoredResponse:
    tenant: str
    response: dict[str, Any]  # the response object as the client got it
    input: list[dict[str, Any]]  # this turn's input items
    # The items the next turn continues from (earlier turns, this input, this output);
    # empty for a natively served response, whose conversation the upstream keeps.
    conversation: list[dict[str, Any]] = field(default_factory=list)
    native: bool = False

    def encode(self) -> bytes:
        return orjson.dumps(
            {
                "t": self.tenant,
                "r": self.response,
                "i": self.input,
                "c": self.conversation,
                "n": self.native,
            }
        )

    @classmethod
    def decode(cls, raw: bytes) -> StoredResponse | None:
        try:
            data = orjson.loads(raw)
            return cls(data["t"], data["r"], data["i"], data["c"], bool(data["n"]))
        except (orjson.JSONDecodeError, KeyError, TypeError):
            return None  # not ours, or written by another version: as if absent


class ResponseStore:
    def __init__(
        self,
        kv: KV,
        *,
        settings: ResponsesSettings,
        timeout: float,
        closers: list[Callable[[], Awaitable[None]]] | None = None,
    ) -> None:
        self._kv = kv
        self._ttl = settings.ttl_seconds
        self._max_bytes = settings.max_stored_bytes
        self._timeout = timeout
        self._closers = closers or []

    async def load(self, response_id: str, *, tenant: str) -> StoredResponse | None:
        """The response, if it exists and belongs to `tenant` (another's is None, like absent:
        a 404 must not tell one tenant which ids another has)."""
        raw = await self._run(lambda: self._kv.get(response_id))
        found = StoredResponse.decode(raw) if raw is not None else None
        return found if found is not None and found.tenant == tenant else None

    async def save(self, response_id: str, record: StoredResponse) -> bool:
        """False when the record is over `max_stored_bytes` (then it is not kept)."""
        raw = record.encode()
        if len(raw) > self._max_bytes:
            return False
        await self._run(lambda: self._kv.set(response_id, raw, ttl=self._ttl))
        return True

    async def delete(self, response_id: str, *, tenant: str) -> bool:
        if await self.load(response_id, tenant=tenant) is None:
            return False
        await self._run(lambda: self._kv.delete(response_id))
        return True

    async def _run(self, action: Callable[[], Awaitable[Any]]) -> Any:
        try:
            async with asyncio.timeout(self._timeout):
                return await action()
        except (StoreError, TimeoutError):
            raise Overloaded(
                "The response store is unavailable; try again shortly.",
                code="response_store_unavailable",
                retry_after=1.0,
            ) from None

    async def aclose(self) -> None:
        for close in self._closers:
            await close()


def build_response_store(settings: Settings, *, clock: Clock) -> ResponseStore:
    """The store `responses.store.backend` names (`auto`: see config/responses.py)."""
    s = settings.responses.store
    backend = s.backend
    cache_store = settings.cache.store
    if backend == "auto":
        if cache_store.backend == "redis" or settings.traffic.store == "redis":
            backend = "redis"
        elif cache_store.backend == "sqlite":
            backend = "sqlite"
        else:
            backend = "memory"
    kv: KV
    closers: list[Callable[[], Awaitable[None]]] = []
    if backend == "memory":
        kv = MemoryKV(max_bytes=s.memory_bytes, clock=clock)
    elif backend == "sqlite":
        from levergate.stores.kv_sqlite import SqliteKV

        sqlite = SqliteKV(s.sqlite_path, busy_timeout=s.timeout_seconds)
        kv, closers = sqlite, [sqlite.aclose]
    else:
        from levergate.stores.kv_redis import RedisKV

        url = s.redis_url or (
            cache_store.redis_url if cache_store.backend == "redis" else settings.traffic.redis_url
        )
        redis = RedisKV(url=url, prefix=s.redis_prefix, timeout=s.timeout_seconds)
        kv, closers = redis, [redis.aclose]
    return ResponseStore(
        kv, settings=settings.responses, timeout=s.timeout_seconds, closers=closers
    )
