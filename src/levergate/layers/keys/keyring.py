"""`Keyring`: every gateway key this gateway accepts, and the operations the admin API offers.

Two sources: the keys listed in `auth.keys` (hashed here, at build time; the plaintext
`SecretStr`s are not kept) and the key store (`auth.store`: SQLite, Redis or memory). Config keys
are looked up first and cannot be rotated or revoked (the file would bring them back at the
next start). Lookups go by sha256 digest, so neither a dict nor the store ever holds a key.

A record read from the store is trusted for `cache_seconds`, so a busy key costs one store
read per interval, not one per request. A revocation through this gateway forgets the record
at once; through another replica it takes effect here within `cache_seconds`. While the store
cannot answer, a record still cached (even if stale) keeps its key working; an unknown key
then gets a 503, never a 401 that would tell a valid client its key is wrong.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from levergate.config import ApiKeySettings, KeyPolicySettings
from levergate.core.clock import Clock
from levergate.errors import BadRequest, NotFound, Overloaded
from levergate.stores.keys import (
    KeyRecord,
    KeyStore,
    KeyStoreError,
    hash_key,
    hint_of,
    new_key,
    new_key_id,
)

_log = logging.getLogger("levergate.keys")
_MAX_CACHED = 10_000  # records cached per process; the oldest half goes beyond this


class Keyring:
    def __init__(
        self,
        *,
        config_keys: Sequence[ApiKeySettings],
        store: KeyStore | None,
        clock: Clock,
        cache_seconds: float,
        timeout: float,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._static = {r.hash: r for r in _config_records(config_keys)}
        self._store = store
        self._clock = clock
        self._ttl = cache_seconds
        self._timeout = timeout
        self._wall = wall
        self._cached: dict[str, tuple[KeyRecord, float]] = {}  # hash -> (record, read at)

    @property
    def writable(self) -> bool:
        return self._store is not None

    async def resolve(self, key: str) -> KeyRecord | None:
        """The record `key` belongs to (revoked ones too: the caller refuses those), or None."""
        digest = hash_key(key)
        if (static := self._static.get(digest)) is not None:
            return static
        if self._store is None:
            return None
        cached = self._cached.get(digest)
        now = self._clock.now()
        if cached is not None and now - cached[1] < self._ttl:
            return cached[0]
        try:
            async with asyncio.timeout(self._timeout):
                record = await self._store.get(digest)
        except (KeyStoreError, TimeoutError) as exc:
            _log.warning("key store unavailable: %s", exc)
            if cached is not None:
                return cached[0]
            raise Overloaded(
                "The key store is unavailable; retry shortly.",
                code="key_store_unavailable",
                retry_after=1.0,
            ) from None
        if record is None:
            self._cached.pop(digest, None)
            return None
        if len(self._cached) >= _MAX_CACHED:
            for old in list(self._cached)[: _MAX_CACHED // 2]:
                del self._cached[old]
        self._cached[digest] = (record, now)
        return record

    # ---- the admin API's operations ----------------------------------------------------

    async def create(
        self, *, tenant: str, name: str, policy: KeyPolicySettings
    ) -> tuple[KeyRecord, str]:
        """A new key and its record; the key is returned here and never again."""
        key = new_key()
        record = KeyRecord(
            id=new_key_id(),
            hash=hash_key(key),
            tenant=tenant,
            name=name,
            created=self._wall(),
            hint=hint_of(key),
            **_policy_fields(policy),
        )
        await self._write(record)
        _log.info("key %s created for tenant %s", record.id, record.tenant)
        return record, key

    async def rotate(self, key_id: str) -> tuple[KeyRecord, str]:
        """A new key for the same record (id, tenant, policy and spend stay); the old key stops
        working at once here, and within `cache_seconds` on other replicas."""
        record = await self._writable(key_id)
        if record.revoked is not None:
            raise BadRequest(f"Key '{key_id}' is revoked; create a new one.", code="key_revoked")
        key = new_key()
        rotated = replace(record, hash=hash_key(key), hint=hint_of(key))
        await self._write(rotated)
        self._cached.pop(record.hash, None)
        _log.info("key %s rotated", key_id)
        return rotated, key

    async def update(
        self, key_id: str, *, name: str | None, policy: KeyPolicySettings
    ) -> KeyRecord:
        """Change a key's name and the policy fields set in `policy` (others stay)."""
        record = await self._writable(key_id)
        changes = {f: getattr(policy, f) for f in policy.model_fields_set if f in _POLICY}
        if name is not None:
            changes["name"] = name
        updated = replace(record, **changes)
        await self._write(updated)
        self._cached.pop(record.hash, None)
        _log.info("key %s updated: %s", key_id, ", ".join(sorted(changes)) or "nothing")
        return updated

    async def revoke(self, key_id: str) -> KeyRecord:
        record = await self._writable(key_id)
        if record.revoked is not None:
            return record
        revoked = replace(record, revoked=self._wall())
        await self._write(revoked)
        self._cached.pop(record.hash, None)
        _log.info("key %s revoked", key_id)
        return revoked

    async def find(self, key_id: str) -> KeyRecord:
        for record in await self.list():
            if record.id == key_id:
                return record
        # The id is the caller's (a path of any length): its start is enough to name it.
        raise NotFound(f"No key with id {key_id[:128]!r}.", code="key_not_found")

    async def list(self, tenant: str | None = None) -> list[KeyRecord]:
        static = [r for r in self._static.values() if tenant is None or r.tenant == tenant]
        if self._store is None:
            return static
        try:
            async with asyncio.timeout(self._timeout):
                stored = await self._store.list(tenant)
        except (KeyStoreError, TimeoutError) as exc:
            raise Overloaded(f"The key store is unavailable: {exc}", retry_after=1.0) from None
        return [*static, *stored]

    async def _writable(self, key_id: str) -> KeyRecord:
        record = await self.find(key_id)
        if record.source == "config":
            raise BadRequest(
                f"Key '{key_id}' is listed in the configuration; change it there.",
                code="key_in_config",
            )
        return record

    async def _write(self, record: KeyRecord) -> None:
        if self._store is None:
            raise BadRequest("This gateway has no key store.", code="no_key_store")
        try:
            async with asyncio.timeout(self._timeout):
                await self._store.put(record)
        except (KeyStoreError, TimeoutError) as exc:
            raise Overloaded(f"The key store is unavailable: {exc}", retry_after=1.0) from None


_POLICY = frozenset(KeyPolicySettings.model_fields)


def _policy_fields(policy: KeyPolicySettings) -> dict[str, Any]:
    return {name: getattr(policy, name) for name in _POLICY}


def _config_records(keys: Sequence[ApiKeySettings]) -> list[KeyRecord]:
    """Config keys get ids from their names (or tenant and position), never from their hash:
    a weak key's digest, shown anywhere, would let anyone test guesses against it. Naming a key
    keeps its id, and so its spend, when the list is reordered."""
    records = []
    for index, key in enumerate(keys):
        records.append(
            KeyRecord(
                id="cfg_" + (key.name or f"{key.tenant}.{index}"),
                hash=hash_key(key.key.get_secret_value()),
                tenant=key.tenant,
                name=key.name,
                source="config",
                **_policy_fields(key),
            )
        )
    return records
