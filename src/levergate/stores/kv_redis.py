"""`RedisKV`: entries in Redis, shared by every gateway replica that points at it.

Keys are namespaced by a prefix (`levergate:cache:` by default) so the cache can share a Redis
with rate limits and job queues, and every key carries a TTL (`SET ... PX`), so Redis itself
expires entries and an idle cache costs nothing. `redis.asyncio` is an optional extra
(`pip install levergate[redis]`); the import happens when a Redis store is built, with a message
that names the extra if it is missing.

Connection failures, timeouts and protocol errors surface as `StoreError`; `SafeKV` turns them
into misses. The client's own socket timeouts are set to the cache's store timeout so a dead
server fails fast rather than hanging a connection. An error reply about the command itself
(an expiry Redis does not accept, a key holding another type) is `StoreRefused`: Redis is up,
and one request's data must not cool the store down for every tenant. Replies that describe
the server (out of memory, read-only replica, loading, busy script) stay `StoreError`. TTLs are
clamped to what Redis accepts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from levergate.errors import ConfigError
from levergate.stores.kv import StoreError, StoreRefused
from levergate.stores.redis_calls import cancellation_kept

if TYPE_CHECKING:
    import redis.asyncio as aioredis


def _redis_module() -> Any:
    try:
        import redis.asyncio as aioredis
    except ImportError:
        raise ConfigError(
            "the Redis cache store needs the 'redis' package: pip install 'levergate[redis]'"
        ) from None
    return aioredis


# Error codes of replies about the server's state that redis-py leaves a plain ResponseError
# (it raises a subclass of its own for OOM, READONLY, LOADING, NOAUTH, NOPERM and the rest).
_SERVER_WIDE = ("BUSY", "MISCONF", "NOREPLICAS", "UNBLOCKED", "MASTERDOWN", "CLUSTERDOWN")
# Redis refuses an expiry past LLONG_MAX ms from now; ~31,700 years is far inside it.
_MAX_TTL_MS = 10**15


class RedisKV:
    def __init__(
        self,
        *,
        url: str,
        prefix: str,
        timeout: float,
        client: aioredis.Redis | None = None,
    ) -> None:
        self._prefix = prefix
        if client is None:
            client = _redis_module().Redis.from_url(
                url,
                socket_timeout=timeout,
                socket_connect_timeout=timeout,
                retry_on_timeout=False,
                health_check_interval=30,
            )
        self._client: aioredis.Redis = client
        from redis.exceptions import RedisError, ResponseError

        self._errors: tuple[type[BaseException], ...] = (RedisError, OSError)
        self._replies: type[BaseException] = ResponseError

    async def get(self, key: str) -> bytes | None:
        try:
            with cancellation_kept():
                value = await self._client.get(self._prefix + key)
        except self._errors as exc:
            raise self._error(exc) from exc
        if value is None or isinstance(value, bytes):
            return value
        raise StoreError(f"redis: entry {key!r} is not bytes (decode_responses is on?)")

    async def set(self, key: str, value: bytes, *, ttl: float) -> None:
        px = _MAX_TTL_MS if not ttl * 1000 < _MAX_TTL_MS else max(1, int(ttl * 1000))
        try:
            with cancellation_kept():
                await self._client.set(self._prefix + key, value, px=px)
        except self._errors as exc:
            raise self._error(exc) from exc

    async def delete(self, key: str) -> None:
        try:
            with cancellation_kept():
                await self._client.delete(self._prefix + key)
        except self._errors as exc:
            raise self._error(exc) from exc

    def _error(self, exc: BaseException) -> StoreError:
        text = str(exc)
        if type(exc) is self._replies and not text.startswith(_SERVER_WIDE):
            return StoreRefused(f"redis refused: {text}")
        return StoreError(f"redis: {text}")

    async def aclose(self) -> None:
        await self._client.aclose()
