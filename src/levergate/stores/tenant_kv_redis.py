"""`RedisTenantKV`: the `TenantKV` policy (stores/tenant_kv.py) in Redis, shared by replicas,
each write one Lua script so replicas never race between the accounting and the eviction.

Why the gateway keeps the books instead of leaving it to Redis: Redis's `maxmemory` is one
bound for everything in it. Responses kept 30 days with `noeviction` filled it (41 requests
continuing a 14 MB conversation), and then Redis refused the writes of the shared rate limits
too, which fell back to per-process limits; with an `allkeys-*` policy Redis would instead
evict rate-limit and cache keys to make room. Here responses stay within `total_bytes` (plus
their bookkeeping, counted per entry), whatever the rest of Redis holds.

Keys, under the store's prefix P, for an entry `m` = `<len(tenant)>:<tenant><key>`:

    P r:<m>            the value (with a Redis expiry a minute past the TTL, as a safety net)
    P lru              sorted set m -> last use (Redis TIME): expiry, across tenants
    P t:<len>:<tenant> sorted set key -> last use: the tenant's LRU order
    P cost             hash m -> cost in bytes
    P tenants          sorted set tenant -> bytes held: the largest tenant is evicted first
    P total            bytes held in all

The scripts build keys from the prefix; on Redis Cluster they all live in one slot when the
prefix carries a hash tag, as the default does, and each script declares `P total` so the
client sends it to that slot.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from levergate.stores.kv import StoreError
from levergate.stores.redis_calls import cancellation_kept, redis_client
from levergate.stores.tenant_kv import PURGE_PER_WRITE, Bounds

if TYPE_CHECKING:
    from redis.asyncio import Redis

_COMMON = """
local P = ARGV[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local function evict(m)
  local cost = tonumber(redis.call('HGET', P .. 'cost', m))
  if not cost then return false end
  local colon = string.find(m, ':', 1, true)
  local n = tonumber(string.sub(m, 1, colon - 1))
  local tenant = string.sub(m, colon + 1, colon + n)
  redis.call('DEL', P .. 'r:' .. m)
  redis.call('ZREM', P .. 'lru', m)
  redis.call('ZREM', P .. 't:' .. string.sub(m, 1, colon + n), string.sub(m, colon + n + 1))
  redis.call('HDEL', P .. 'cost', m)
  if tonumber(redis.call('ZINCRBY', P .. 'tenants', -cost, tenant)) <= 0 then
    redis.call('ZREM', P .. 'tenants', tenant)
  end
  redis.call('DECRBY', P .. 'total', cost)
  return true
end
local function oldest_but(tm, keep)
  for _, key in ipairs(redis.call('ZRANGE', P .. 't:' .. tm, 0, 1)) do
    if key ~= keep then return key end
  end
  return nil
end
"""

# ARGV: P, tenant, tm, key, value, cost, tenant bound, total bound, ttl, purge per write.
PUT = (
    _COMMON
    + """
local tenant, tm, key, value = ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local cost, bound, total, ttl = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8]),
  tonumber(ARGV[9])
local m = tm .. key
evict(m)
redis.call('SET', P .. 'r:' .. m, value, 'PX', math.ceil(ttl * 1000) + 60000)
redis.call('ZADD', P .. 'lru', now, m)
redis.call('ZADD', P .. 't:' .. tm, now, key)
redis.call('HSET', P .. 'cost', m, cost)
redis.call('ZINCRBY', P .. 'tenants', cost, tenant)
redis.call('INCRBY', P .. 'total', cost)
local stale = redis.call('ZRANGEBYSCORE', P .. 'lru', '-inf', now - ttl, 'LIMIT', 0, ARGV[10])
for _, old in ipairs(stale) do evict(old) end
while tonumber(redis.call('ZSCORE', P .. 'tenants', tenant) or 0) > bound do
  local oldest = oldest_but(tm, key)
  if not oldest then break end
  evict(tm .. oldest)
end
while tonumber(redis.call('GET', P .. 'total') or 0) > total do
  local evicted = false
  for _, who in ipairs(redis.call('ZREVRANGE', P .. 'tenants', 0, 1)) do
    local whom = #who .. ':' .. who
    local oldest = oldest_but(whom, who == tenant and key or nil)
    if oldest then
      evicted = evict(whom .. oldest)
      break
    end
    if redis.call('ZCARD', P .. 't:' .. whom) == 0 then  -- books without entries: heal them
      local held = tonumber(redis.call('ZSCORE', P .. 'tenants', who) or 0)
      redis.call('ZREM', P .. 'tenants', who)
      redis.call('DECRBY', P .. 'total', held)
      evicted = true
      break
    end
  end
  if not evicted then break end
end
return 1
"""
)

# ARGV: P, tm, ttl, key... Returns each value or nil; marks each found one used.
GET = (
    _COMMON
    + """
local tm, ttl = ARGV[2], tonumber(ARGV[3])
local out = {}
for i = 4, #ARGV do
  local key = ARGV[i]
  local m = tm .. key
  local used = redis.call('ZSCORE', P .. 'lru', m)
  local value = false
  if used and now - tonumber(used) < ttl then value = redis.call('GET', P .. 'r:' .. m) end
  if value then
    redis.call('ZADD', P .. 'lru', now, m)
    redis.call('ZADD', P .. 't:' .. tm, now, key)
    redis.call('PEXPIRE', P .. 'r:' .. m, math.ceil(ttl * 1000) + 60000)
  elseif used then
    evict(m)
  end
  out[#out + 1] = value
end
return out
"""
)

# ARGV: P, m. 1 when it was there.
DELETE = (
    _COMMON
    + """
if evict(ARGV[2]) then return 1 end
return 0
"""
)


def _tenant_mark(tenant: str) -> str:
    return f"{len(tenant.encode())}:{tenant}"


class RedisTenantKV:
    def __init__(
        self, *, url: str, prefix: str, bounds: Bounds, timeout: float, client: Redis | None = None
    ) -> None:
        self._prefix = prefix
        self._bounds = bounds
        self._timeout = timeout
        self._client = client or redis_client(url=url, timeout=timeout, what="responses.store")
        self._put = self._client.register_script(PUT)
        self._get = self._client.register_script(GET)
        self._delete = self._client.register_script(DELETE)

    async def put(self, tenant: str, key: str, value: bytes) -> None:
        cost = self._bounds.cost(key, value)
        self._bounds.refuse_over(cost)
        b = self._bounds
        await self._run(self._put, [self._prefix, tenant, _tenant_mark(tenant), key, value, cost,
                                    b.tenant_bytes, b.total_bytes, repr(b.ttl),
                                    PURGE_PER_WRITE])  # fmt: skip

    async def get(self, tenant: str, keys: Sequence[str]) -> list[bytes | None]:
        if not keys:
            return []
        found = await self._run(self._get, [self._prefix, _tenant_mark(tenant),
                                            repr(self._bounds.ttl), *keys])  # fmt: skip
        if not isinstance(found, list) or len(found) != len(keys):
            raise StoreError("redis: the response store answered garbage")
        return [value if isinstance(value, bytes) else None for value in found]

    async def delete(self, tenant: str, key: str) -> bool:
        return bool(await self._run(self._delete, [self._prefix, _tenant_mark(tenant) + key]))

    async def bytes_of(self, tenant: str) -> int:
        held = await self._call(self._client.zscore(self._prefix + "tenants", tenant))
        return int(held or 0)

    async def aclose(self) -> None:
        await self._client.aclose()

    async def _run(self, script: Any, args: list[Any]) -> Any:
        # One declared key routes the script to the prefix's slot on a Cluster.
        return await self._call(script(keys=[self._prefix + "total"], args=args))

    async def _call(self, call: Any) -> Any:
        from redis.exceptions import RedisError

        try:
            async with asyncio.timeout(self._timeout):
                with cancellation_kept():
                    return await call
        except (RedisError, OSError, TimeoutError) as exc:
            raise StoreError(f"redis: {type(exc).__name__}: {exc}") from exc
