"""What every Redis-backed store shares: how its client is made, and a guard around its calls.

`redis_client` makes a client that fails within the store's timeout (a dead server fails fast)
and says which setting asked for Redis when the optional `redis` package is missing.

With a socket timeout set (every levergate store sets one, so a dead server fails fast),
redis-py 8.1 can swallow a cancellation that lands inside a command: the call returns, or
raises a connection error, instead of letting `CancelledError` through (redis-py#2028 is the
same family). Measured here: about 1 in 10 cancels of a cache `GET` came out that way. A
cancelled request would then run on, a connection error would put a healthy store in its
cool-down, and a background job told to stop would never stop. `cancellation_kept` raises the
cancellation the task was given, whatever redis-py did with it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

from levergate.errors import ConfigError

if TYPE_CHECKING:
    from redis.asyncio import Redis


def redis_client(*, url: str, timeout: float, what: str) -> Redis:
    """A client on `url` that fails within `timeout`; `what` names the setting in the message
    shown when the optional `redis` package is missing."""
    try:
        from redis.asyncio import Redis
    except ImportError:
        raise ConfigError(
            f"{what} is 'redis' but the redis package is missing: pip install 'levergate[redis]'"
        ) from None
    return Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)


@contextlib.contextmanager
def cancellation_kept() -> Iterator[None]:
    task = asyncio.current_task()
    before = task.cancelling() if task is not None else 0
    try:
        yield
    finally:
        if task is not None and task.cancelling() > before:
            raise asyncio.CancelledError
