"""`ResponseStore`: the responses levergate keeps for `previous_response_id`, `GET` and `DELETE
/v1/responses/{id}` and `input_items`, each owned by the tenant that made it.

Where in the stack: the Responses bridge (layers/responses.py) saves every stored response when
it completes and loads the conversation a request continues; the edge's GET / DELETE handlers
read and drop them. A response passed through natively is kept too (the upstream holds the
conversation; the record says who owns the id, so another tenant naming it gets a 404 before
anything is sent upstream).

Each turn is stored once: its input, the response (with its output), and the ids of the turns
before it — the one it continues and up to `STRIDE - 1` more, nearest first. A conversation is
read back by following those ids, `STRIDE` turns per round trip, so a chain of N turns costs
O(N) bytes to keep (it cost O(N^2) when every turn carried a copy of the whole conversation:
a 120-byte request continuing a 14 MB conversation stored 14 MB) and N / STRIDE reads to
rebuild. Each turn also carries the conversation's item count, so a request that would pass
`max_conversation_items` is refused before anything is read. Reading a turn marks it used,
so the turns of a conversation that is continued stay as long as it does; a turn that is
gone (deleted, evicted, expired) fails the request that needs it with a 404 naming it.

Over the `TenantKV` seam (stores/tenant_kv.py): bounded per tenant and in total on every
backend — memory, SQLite or Redis, chosen by `stores.select.responses` (config/responses.py
says how `auto` decides). Unlike a cache, a store failure is not a miss: a conversation that
cannot be read must fail its request (503), never start over silently.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson

from levergate.config import ResponsesSettings, Settings
from levergate.core.clock import Clock
from levergate.core.json_bound import parse_json
from levergate.errors import NotFound, Overloaded
from levergate.stores import select
from levergate.stores.kv import StoreError, StoreRefused
from levergate.stores.registry import StoreRegistry
from levergate.stores.tenant_kv import Bounds, MemoryTenantKV, TenantKV

# Earlier turns' ids each turn carries: a conversation of N turns is N / STRIDE reads.
STRIDE = 64
# Bytes of stored turns decoded between two yields to the event loop (about 1-3 ms of parsing).
_DECODE_SLICE = 1 << 20


@dataclass(frozen=True, slots=True)
class StoredResponse:
    tenant: str
    response: dict[str, Any]  # the response object as the client got it (its output included)
    input: list[dict[str, Any]]  # this turn's input items
    native: bool = False
    # The turns before this one, nearest first, at most STRIDE (empty for a first or native one).
    earlier: tuple[str, ...] = ()
    depth: int = 1  # turns in the conversation through this one
    items: int = 0  # items in the conversation through this one

    @property
    def output(self) -> list[dict[str, Any]]:
        found = self.response.get("output")
        return found if isinstance(found, list) else []

    @classmethod
    def turn(
        cls,
        *,
        tenant: str,
        response: dict[str, Any],
        input: list[dict[str, Any]],  # noqa: A002 - the Responses API's name
        previous: tuple[str, StoredResponse] | None,
    ) -> StoredResponse:
        """A translated turn, continuing `previous` (its id and record) when there is one."""
        made = cls(tenant, response, input)
        before = 0
        if previous is not None:
            previous_id, last = previous
            before = last.items
            made = dataclasses.replace(made, earlier=(previous_id, *last.earlier)[:STRIDE],
                                       depth=last.depth + 1)  # fmt: skip
        return dataclasses.replace(made, items=before + len(input) + len(made.output))

    def encode(self) -> bytes:
        return orjson.dumps({"t": self.tenant, "r": self.response, "i": self.input,
                             "n": self.native, "e": self.earlier, "d": self.depth,
                             "k": self.items})  # fmt: skip

    @classmethod
    def decode(cls, raw: bytes) -> StoredResponse | None:
        try:
            data = parse_json(raw)
            earlier = tuple(str(e) for e in data["e"])
            return cls(data["t"], data["r"], data["i"], bool(data["n"]), earlier,
                       int(data["d"]), int(data["k"]))  # fmt: skip
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            return None  # not ours, or written by another version: as if absent


class ResponseStore:
    def __init__(
        self,
        kv: TenantKV,
        *,
        settings: ResponsesSettings,
        timeout: float,
        closers: list[Callable[[], Awaitable[None]]] | None = None,
    ) -> None:
        self._kv = kv
        self._max_bytes = settings.max_stored_bytes
        self._timeout = timeout
        self._closers = closers or []

    async def load(self, response_id: str, *, tenant: str) -> StoredResponse | None:
        """The response, if it exists and belongs to `tenant` (another's is None, like absent:
        a 404 must not tell one tenant which ids another has)."""
        found = await self._many([response_id], tenant=tenant)
        return found[0]

    async def conversation(self, head: StoredResponse, *, tenant: str) -> list[dict[str, Any]]:
        """Every item of the conversation through `head`, oldest first: each turn's input, then
        its output. NotFound naming the first earlier turn that is gone."""
        turns = [head]
        while len(turns) < head.depth:
            wanted = list(turns[-1].earlier[: head.depth - len(turns)])
            found = await self._many(wanted, tenant=tenant) if wanted else [None]
            for position, turn in enumerate(found):
                if turn is None:
                    raise _gone(wanted[position] if wanted else None)
                turns.append(turn)
        items: list[dict[str, Any]] = []
        for turn in reversed(turns):
            items += turn.input
            items += turn.output
        return items

    async def save(self, response_id: str, record: StoredResponse) -> bool:
        """False when the record is over `max_stored_bytes` or the tenant's whole bound (then it
        is not kept)."""
        raw = record.encode()
        if len(raw) > self._max_bytes:
            return False
        try:
            await self._run(lambda: self._kv.put(record.tenant, response_id, raw))
        except StoreRefused:
            return False
        return True

    async def delete(self, response_id: str, *, tenant: str) -> bool:
        return bool(await self._run(lambda: self._kv.delete(tenant, response_id)))

    async def _many(self, ids: list[str], *, tenant: str) -> list[StoredResponse | None]:
        """The turns `ids` names, decoded with the event loop given back every `_DECODE_SLICE`
        bytes: a conversation at the tenant's bound (32 MiB in the soak) was one parse of it
        all, 30-100 ms in which no other tenant's request moved (issue 20)."""
        raws: list[bytes | None] = await self._run(lambda: self._kv.get(tenant, ids))
        found: list[StoredResponse | None] = []
        decoded = 0
        for raw in raws:
            if raw is None:
                found.append(None)
                continue
            if decoded >= _DECODE_SLICE:
                decoded = 0
                await asyncio.sleep(0)
            decoded += len(raw)
            turn = StoredResponse.decode(raw)
            found.append(turn if turn is not None and turn.tenant == tenant else None)
        return found

    async def _run(self, action: Callable[[], Awaitable[Any]]) -> Any:
        try:
            async with asyncio.timeout(self._timeout):
                return await action()
        except StoreRefused:
            raise
        except (StoreError, TimeoutError):
            raise Overloaded(
                "The response store is unavailable; try again shortly.",
                code="response_store_unavailable",
                retry_after=1.0,
            ) from None

    async def aclose(self) -> None:
        for close in self._closers:
            await close()


def _gone(response_id: str | None) -> NotFound:
    which = f"'{response_id}'" if response_id is not None else "one"
    return NotFound(
        f"An earlier response of this conversation ({which}) is no longer stored: deleted, "
        "or unused for `responses.ttl_seconds`; the conversation cannot be continued.",
        param="previous_response_id", code="previous_response_not_found",
    )  # fmt: skip


def build_response_store(
    settings: Settings, *, clock: Clock, registry: StoreRegistry
) -> ResponseStore:
    """The store `stores.select.responses` chooses (`auto`: see config/responses.py)."""
    s = settings.responses.store
    choice = select.responses(settings)
    total = s.memory_bytes if choice.backend == "memory" else s.max_bytes
    bounds = Bounds(tenant_bytes=s.tenant_bytes, total_bytes=total,
                    ttl=settings.responses.ttl_seconds)  # fmt: skip
    kv: TenantKV
    closers: list[Callable[[], Awaitable[None]]] = []
    if choice.backend == "sqlite":
        from levergate.stores.tenant_kv_sqlite import SqliteTenantKV

        sqlite = SqliteTenantKV(choice.address or s.sqlite_path, bounds=bounds,
                                busy_timeout=s.timeout_seconds)  # fmt: skip
        kv, closers = sqlite, [sqlite.aclose]
    elif choice.backend == "redis":
        from levergate.stores.tenant_kv_redis import RedisTenantKV

        client = registry.redis(choice, what="responses.store")
        redis = RedisTenantKV(url="", prefix=s.redis_prefix, bounds=bounds,
                              timeout=s.timeout_seconds, client=client)  # fmt: skip
        kv, closers = redis, [redis.aclose]
    else:
        kv = MemoryTenantKV(bounds=bounds, clock=clock)
    return ResponseStore(
        kv, settings=settings.responses, timeout=s.timeout_seconds, closers=closers
    )
