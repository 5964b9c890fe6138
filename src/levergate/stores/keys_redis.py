"""`RedisKeyStore`: key records in Redis, shared by every gateway replica that points at it.

Three kinds of key under the prefix: `id:<id>` holds the record (JSON), `hash:<sha256>` the id
its current key belongs to, and `ids` a sorted set of every id by creation time. `put` is one
Lua script, so a rotation drops the old hash and writes the new one atomically: no replica ever
sees both keys of a rotated record resolve, nor neither. The default prefix carries a `{...}`
hash tag, so on Redis Cluster all of them share one slot and the script stays legal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from levergate.stores.keys import KeyRecord, KeyStoreError
from levergate.stores.redis_calls import cancellation_kept

if TYPE_CHECKING:
    from redis.asyncio import Redis

# KEYS: id key, new hash key, ids set. ARGV: record JSON, id, created, prefix.
_PUT = """
local old = redis.call('GET', KEYS[1])
if old then
  local previous = ARGV[4] .. 'hash:' .. cjson.decode(old)['hash']
  if previous ~= KEYS[2] then redis.call('DEL', previous) end
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], ARGV[2])
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[2])
return 1
"""

# KEYS: hash key. ARGV: prefix. The record of the id the hash points at, in one round trip.
_GET = """
local id = redis.call('GET', KEYS[1])
if not id then return false end
return redis.call('GET', ARGV[1] .. 'id:' .. id)
"""


class RedisKeyStore:
    def __init__(self, client: Redis, *, prefix: str) -> None:
        from redis.exceptions import RedisError

        self._client = client
        self._prefix = prefix
        self._put = client.register_script(_PUT)
        self._get = client.register_script(_GET)
        self._errors: tuple[type[BaseException], ...] = (RedisError, OSError, TimeoutError)

    async def get(self, key_hash: str) -> KeyRecord | None:
        raw = await self._run(
            self._get(keys=[self._prefix + "hash:" + key_hash], args=[self._prefix])
        )
        return None if raw is None else KeyRecord.from_bytes(raw)

    async def put(self, record: KeyRecord) -> None:
        p = self._prefix
        keys = [p + "id:" + record.id, p + "hash:" + record.hash, p + "ids"]
        args: list[bytes | str] = [record.to_bytes(), record.id, repr(record.created), p]
        await self._run(self._put(keys=keys, args=args))

    async def list(self, tenant: str | None = None) -> list[KeyRecord]:
        ids = await self._run(self._client.zrange(self._prefix + "ids", 0, -1))
        if not ids:
            return []
        names = [self._prefix + "id:" + i.decode() for i in ids]
        raws = await self._run(self._client.mget(names))
        records = [KeyRecord.from_bytes(raw) for raw in raws if raw is not None]
        return [r for r in records if tenant is None or r.tenant == tenant]

    async def aclose(self) -> None:
        await self._client.aclose()

    async def _run(self, pending: Any) -> Any:
        try:
            with cancellation_kept():
                return await pending
        except self._errors as exc:
            raise KeyStoreError(f"redis key store: {type(exc).__name__}: {exc}") from exc
