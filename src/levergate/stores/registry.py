"""`StoreRegistry`: the gateway's store connections, opened once and shared.

Where in the stack: `Shared.build` makes one per pipeline, before any store; each store
builder asks `stores/select.py` where its state lives and, for Redis, takes a client from here.
Every client on one URL shares one connection pool, whichever sections use it (the limits, the
caches, the semantic index, keys, budgets, responses), so a replica holds one pool per Redis
rather than one per section; `aclose` disconnects each pool once, after every store is closed.

The pool's socket timeouts are a backstop for a dead server (the connection's
`timeout_seconds`, 5 s by default): each store bounds its own calls tighter with
`asyncio.timeout` (the cache 0.1 s, the limits 1 s, ...), as one pool cannot carry a timeout
per caller.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from levergate.config import ConnectionSettings, Settings
from levergate.errors import ConfigError
from levergate.stores.select import Choice, deprecations

if TYPE_CHECKING:
    from redis.asyncio import ConnectionPool, Redis

_log = logging.getLogger("levergate.stores")

DEFAULT_TIMEOUT: float = ConnectionSettings.model_fields["timeout_seconds"].default


class StoreRegistry:
    def __init__(self, settings: Settings) -> None:
        self._pools: dict[str, ConnectionPool] = {}
        # A URL two connections name gets the larger of their timeouts.
        self._timeouts: dict[str, float] = {}
        for connection in settings.stores.values():
            if connection.redis_url is not None:
                url = connection.redis_url.get_secret_value()
                known = self._timeouts.get(url, 0.0)
                self._timeouts[url] = max(known, connection.timeout_seconds)

    @classmethod
    def build(cls, settings: Settings) -> StoreRegistry:
        """The registry, after logging each deprecated setting the configuration uses."""
        for line in deprecations(settings):
            _log.warning("%s", line)
        return cls(settings)

    def redis(self, choice: Choice, *, what: str) -> Redis:
        """A client on the pool of `choice`'s URL (made at the first ask; nothing connects
        until a command). `what` names the section in the message shown when the optional
        `redis` package is missing."""
        if choice.backend != "redis" or choice.address is None:
            raise ConfigError(f"{what}: no Redis URL to connect to")
        try:
            from redis.asyncio import ConnectionPool, Redis
        except ImportError:
            raise ConfigError(
                f"{what} is 'redis' but the redis package is missing: "
                "pip install 'levergate[redis]'"
            ) from None
        url = choice.address
        pool = self._pools.get(url)
        if pool is None:
            timeout = self._timeouts.get(url, DEFAULT_TIMEOUT)
            pool = ConnectionPool.from_url(
                url,
                socket_timeout=timeout,
                socket_connect_timeout=timeout,
                retry_on_timeout=False,
                health_check_interval=30,
            )
            self._pools[url] = pool
        # A client on a pool it was given leaves the pool open when it is closed.
        return Redis(connection_pool=pool)

    @property
    def pools(self) -> int:
        """Redis connection pools open: one per URL in use."""
        return len(self._pools)

    def socket_timeout(self, client: Redis) -> float:
        """The socket timeout of `client`'s pool (a blocking read must end before it)."""
        value = client.connection_pool.connection_kwargs.get("socket_timeout")
        return float(value) if isinstance(value, int | float) else DEFAULT_TIMEOUT

    async def aclose(self) -> None:
        pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            await pool.disconnect()
