"""`MemcachedKV`: exact-cache and embeddings-cache entries in Memcached, shared by replicas.

Memcached is a cache and nothing more: it may evict any item at any time, restarts empty, and
refuses items over its item size limit (`-I`, 1 MiB by default). Each of those is a miss here,
never an error a request sees: `SafeKV` turns a down or restarted server into a counted miss.

The client is pymemcache's `PooledClient`, driven from a small thread pool of this store's own.
aiomcache (0.8.2) was the asyncio-native candidate, but its pool takes a connection back after a
cancelled get with the reply still unread (its `acquire` catches `Exception`, not
`CancelledError`): every later get on that socket reads the reply before its own, so it misses,
or returns the value a key had before it was overwritten or deleted, for as long as the
connection lives. The cache's timeout cancels commands routinely (39 of 200 cancelled-then-
overwritten reads went wrong through aiomcache in the test that guards this store). With threads
a timed-out wait leaves the command running to its end (bounded by the socket timeout), and
pymemcache drops a connection on any error.

Keys are hashed (BLAKE2b) under the prefix: Memcached keys are at most 250 bytes with no spaces
or control characters, and tenant namespaces are arbitrary text. A value over one item is split:
its chunks go under keys carrying a random generation, then a small manifest under the key
itself (memcached flag 1), so a reader sees either a whole old value, a whole new one, or a miss
(a chunk evicted, or a manifest that points at chunks that were never all written).

Memcached reads an expiry over 30 days as a Unix time, so longer TTLs are sent as one.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import os
import struct
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

from levergate.errors import ConfigError
from levergate.stores.kv import StoreError, StoreRefused

if TYPE_CHECKING:
    from levergate.config import CacheStoreSettings

T = TypeVar("T")

PLAIN, MANIFEST = 0, 1
# generation (8 random bytes), chunk count, total length
_MANIFEST = struct.Struct("<8sII")
# Memcached's own per-item overhead (item header, key, suffix) stays under this.
ITEM_OVERHEAD = 1024
MAX_RELATIVE_TTL = 30 * 24 * 3600
MAX_UNIX_TIME = 2**31 - 1
# A manifest naming more chunks than this is not one of ours (64 MiB entries in 1 MiB items
# take 65).
MAX_CHUNKS = 4096


class _Flagged:
    """pymemcache serde: values travel as (flags, bytes) so a manifest needs no marker byte
    (and so no copy of a megabyte value to prepend one)."""

    def serialize(self, _key: str, value: tuple[int, bytes]) -> tuple[bytes, int]:
        return value[1], value[0]

    def deserialize(self, _key: str, value: bytes, flags: int) -> tuple[int, bytes]:
        return flags, value


def expiry(ttl: float, *, now: float) -> int:
    """Memcached's `exptime` for `ttl` seconds: at least 1 (0 would mean never), whole seconds
    rounded up, and a Unix time past 30 days (capped where its 32-bit field ends)."""
    if ttl <= MAX_RELATIVE_TTL:
        return max(1, math.ceil(ttl))
    if not ttl < MAX_UNIX_TIME:  # inf, nan and anything past 2038
        return MAX_UNIX_TIME
    return min(MAX_UNIX_TIME, math.ceil(now + ttl))


class MemcachedKV:
    def __init__(
        self,
        *,
        host: str,
        port: int,
        prefix: str,
        timeout: float,
        item_bytes: int,
        connections: int,
        wall: Callable[[], float] = time.time,
    ) -> None:
        try:
            from pymemcache import exceptions
            from pymemcache.client.base import PooledClient
        except ImportError:
            raise ConfigError(
                "the Memcached cache store needs 'pymemcache': pip install 'levergate[memcached]'"
            ) from None
        self._client = PooledClient(
            (host, port),
            serde=_Flagged(),
            connect_timeout=timeout,
            timeout=timeout,
            no_delay=True,
            max_pool_size=connections,
            default_noreply=False,
        )
        self._server_error = exceptions.MemcacheServerError
        self._closed = exceptions.MemcacheUnexpectedCloseError
        self._illegal = exceptions.MemcacheIllegalInputError
        self._errors: tuple[type[BaseException], ...] = (exceptions.MemcacheError, OSError)
        self._prefix = prefix
        self._chunk = item_bytes - ITEM_OVERHEAD
        self._wall = wall
        self._executor = ThreadPoolExecutor(connections, thread_name_prefix="levergate-memcached")

    async def get(self, key: str) -> bytes | None:
        return await self._call(self._get, self._key(key))

    async def set(self, key: str, value: bytes, *, ttl: float) -> None:
        await self._call(self._set, self._key(key), value, ttl)

    async def delete(self, key: str) -> None:
        await self._call(self._delete, self._key(key))

    async def aclose(self) -> None:
        await asyncio.to_thread(self._executor.shutdown, wait=True)
        self._client.close()

    # ---- worker threads ----------------------------------------------------------------------

    def _get(self, key: str) -> bytes | None:
        found: tuple[int, bytes] | None = self._client.get(key)
        if found is None:
            return None
        flags, data = found
        if flags == PLAIN:
            return data
        chunks = self._manifest(key, data)
        if flags != MANIFEST or chunks is None:
            return None  # not written by this store: a miss, not a failure of the server
        values: dict[str, tuple[int, bytes]] = self._client.get_many(chunks)
        parts = [values.get(chunk) for chunk in chunks]
        if any(part is None for part in parts):
            return None  # a chunk was evicted: the value is gone
        joined = b"".join(part[1] for part in parts if part is not None)
        return joined if len(joined) == _MANIFEST.unpack(data)[2] else None

    def _set(self, key: str, value: bytes, ttl: float) -> None:
        exptime = expiry(ttl, now=self._wall())
        if len(value) <= self._chunk:
            self._client.set(key, (PLAIN, value), expire=exptime)
            return
        generation = os.urandom(8)
        count = -(-len(value) // self._chunk)
        if count > MAX_CHUNKS:
            raise StoreRefused(f"a {len(value)}-byte value needs over {MAX_CHUNKS} items")
        view = memoryview(value)
        chunks = {
            _chunk_key(key, generation, i): (PLAIN, bytes(view[i * self._chunk :][: self._chunk]))
            for i in range(count)
        }
        failed = self._client.set_many(chunks, expire=exptime)
        if failed:
            raise StoreRefused(f"memcached stored {count - len(failed)} of {count} chunks")
        manifest = _MANIFEST.pack(generation, count, len(value))
        self._client.set(key, (MANIFEST, manifest), expire=exptime)

    def _delete(self, key: str) -> None:
        found: tuple[int, bytes] | None = self._client.get(key)
        if found is not None and found[0] == MANIFEST:
            chunks = self._manifest(key, found[1]) or []
            if chunks:
                self._client.delete_many(chunks)
        self._client.delete(key)

    def _manifest(self, key: str, data: bytes) -> list[str] | None:
        """The chunk keys a manifest names; None when it is not a manifest of a sane size."""
        if len(data) != _MANIFEST.size:
            return None
        generation, count, length = _MANIFEST.unpack(data)
        if not 0 < count <= MAX_CHUNKS or count != -(-length // self._chunk):
            return None
        return [_chunk_key(key, generation, i) for i in range(count)]

    # ---- the loop side -----------------------------------------------------------------------

    def _key(self, key: str) -> str:
        return self._prefix + hashlib.blake2b(key.encode(), digest_size=20).hexdigest()

    async def _call(self, action: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, action, *args)
        except self._errors as exc:
            raise self._error(exc) from exc

    def _error(self, exc: BaseException) -> StoreError:
        """`StoreRefused` when the server is up and refused this one value (too large for an
        item, or not legal for it); `StoreError` for the server itself (gone, out of memory)."""
        refused = isinstance(exc, self._illegal) or (
            isinstance(exc, self._server_error)
            and not isinstance(exc, self._closed)
            and "too large" in str(exc)
        )
        if refused:
            return StoreRefused(f"memcached refused: {exc}")
        return StoreError(f"memcached: {type(exc).__name__}: {exc}")


def _chunk_key(key: str, generation: bytes, index: int) -> str:
    return f"{key}:{generation.hex()}:{index}"


def connect_memcached(settings: CacheStoreSettings, *, address: str) -> MemcachedKV:
    """The cache store's Memcached at `address` (`host:port`, from `stores.select`), sized
    by the cache store's settings: the one place a Memcached client is made."""
    host, _, port = address.rpartition(":")
    if not 0 < int(port) < 65536:
        raise ConfigError(f"memcached address {address!r}: port {port} is not in 1..65535")
    return MemcachedKV(
        host=host.strip("[]"),
        port=int(port),
        prefix=settings.memcached_prefix,
        timeout=settings.timeout_seconds,
        item_bytes=settings.memcached_item_bytes,
        connections=settings.memcached_connections,
    )
