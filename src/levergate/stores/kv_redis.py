"""`RedisKV`: entries in Redis, shared by every gateway replica that points at it.

Keys are namespaced by a prefix (`levergate:cache:` by default) so the cache can share a Redis
with rate limits and job queues, and every key carries a TTL (`SET ... PX`), so Redis itself
expires entries and an idle cache costs nothing. `redis.asyncio` is an optional extra
(`pip install levergate[redis]`); the import happens when a Redis store is built, with a message
that names the extra if it is missing.

Connection failures, timeouts and protocol errors surface as `StoreError`; `SafeKV` turns them
into misses. The client's own socket timeouts are set to the cache's store timeout so a dead
server fails fast rather than hanging a connection.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from levergate.errors import ConfigError
from levergate.stores.kv import StoreError
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
        from redis.exceptions import RedisError

        self._errors: tuple[type[BaseException], ...] = (RedisError, OSError)

    async def get(self, key: str) -> bytes | None:
        try:
            with cancellation_kept():
                value = await self._client.get(self._prefix + key)
        except self._errors as exc:
            raise StoreError(f"redis: {exc}") from exc
        if value is None or isinstance(value, bytes):
            return value
        raise StoreError(f"redis: entry {key!r} is not bytes (decode_responses is on?)")

    async def set(self, key: str, value: bytes, *, ttl: float) -> None:
        try:
            with cancellation_kept():
                await self._client.set(self._prefix + key, value, px=max(1, int(ttl * 1000)))
        except self._errors as exc:
            raise StoreError(f"redis: {exc}") from exc

    async def delete(self, key: str) -> None:
        try:
            with cancellation_kept():
                await self._client.delete(self._prefix + key)
        except self._errors as exc:
            raise StoreError(f"redis: {exc}") from exc

    async def aclose(self) -> None:
        await self._client.aclose()
