"""The key-store seam: gateway API keys ("virtual keys"), stored hashed, mapped to tenants.

Three methods. `get(key_hash)` finds the record a presented key hashes to (what every request
asks), `put(record)` writes a record under its id (creation, rotation and revocation are all
puts: a rotated record carries a new hash and the old one stops resolving), `list(tenant)`
answers the admin API.

Only `sha256(key)` is stored, never the key. No pepper and no slow hash: generated keys are 256
bits from `secrets` (`new_key`), so neither a dictionary nor brute force can invert a leaked
digest, and a pepper would be one more secret whose loss locks every client out. Keys an
operator writes into the configuration may be weak, but that file holds them in plaintext
anyway; their digests protect what the file already does.

Implementations: `MemoryKeyStore` (tests, config keys), `SqliteKeyStore` (one machine, the
default; stores/keys_sqlite.py) and `RedisKeyStore` (shared by replicas; stores/keys_redis.py).
"""

from __future__ import annotations

import dataclasses
import hashlib
import secrets
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from levergate.core.json_bound import parse_json

KEY_PREFIX = "lg-"
_KEY_BYTES = 32  # 256 bits: see the module docstring for why a plain sha256 is then enough


class KeyStoreError(Exception):
    """The store could not answer (down, locked, broken); the caller decides what that means."""


@dataclass(frozen=True, slots=True)
class KeyRecord:
    """One key. `hash` is the hex sha256 of the key; `hint` its first and last characters, so a
    person can tell keys apart; times are Unix seconds; `revoked` is when, or None."""

    id: str
    hash: str
    tenant: str
    name: str = ""
    created: float = 0.0
    revoked: float | None = None
    models: tuple[str, ...] = ()
    rpm: int | None = None
    tpm: int | None = None
    daily_budget_usd: float | None = None
    monthly_budget_usd: float | None = None
    hint: str = ""
    roles: tuple[str, ...] = ()  # KeyPolicySettings.roles
    # "store" for keys made through the admin API, "config" for `auth.keys`.
    source: str = "store"

    def allows(self, model: str) -> bool:
        return not self.models or model in self.models

    def public(self) -> dict[str, Any]:
        """What the admin API shows: everything but the hash."""
        shown = dataclasses.asdict(self)
        del shown["hash"]
        shown["models"] = list(self.models)
        shown["roles"] = list(self.roles)
        return shown

    def to_bytes(self) -> bytes:
        return orjson.dumps(dataclasses.asdict(self))

    @classmethod
    def from_bytes(cls, raw: bytes | str) -> KeyRecord:
        try:
            data = parse_json(raw)
            data["models"] = tuple(data.get("models") or ())
            data["roles"] = tuple(data.get("roles") or ())
            # Fields a newer gateway added are skipped, so replicas can be upgraded one by one.
            return cls(**{k: v for k, v in data.items() if k in _FIELDS})
        except (orjson.JSONDecodeError, TypeError, KeyError, AttributeError) as exc:
            raise KeyStoreError(f"unreadable key record: {exc}") from exc


_FIELDS = frozenset(f.name for f in dataclasses.fields(KeyRecord))


class KeyStore(Protocol):
    async def get(self, key_hash: str) -> KeyRecord | None:
        """The record whose current key hashes to `key_hash`, revoked or not; None if none."""
        ...

    async def put(self, record: KeyRecord) -> None:
        """Create or replace the record with `record.id` (its previous hash stops resolving)."""
        ...

    async def list(self, tenant: str | None = None) -> list[KeyRecord]:
        """Every record, or a tenant's, oldest first."""
        ...


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def new_key() -> str:
    """A fresh key: `lg-` and 43 URL-safe characters."""
    return KEY_PREFIX + secrets.token_urlsafe(_KEY_BYTES)


def new_key_id() -> str:
    return "key_" + secrets.token_hex(8)


def hint_of(key: str) -> str:
    return f"{key[:7]}...{key[-4:]}" if len(key) > 16 else "..."


class MemoryKeyStore:
    """Records in two dicts: by id, and id by hash. One process; nothing survives it."""

    def __init__(self) -> None:
        self._records: dict[str, KeyRecord] = {}
        self._by_hash: dict[str, str] = {}

    async def get(self, key_hash: str) -> KeyRecord | None:
        found = self._by_hash.get(key_hash)
        return None if found is None else self._records[found]

    async def put(self, record: KeyRecord) -> None:
        old = self._records.get(record.id)
        if old is not None and old.hash != record.hash:
            self._by_hash.pop(old.hash, None)
        self._records[record.id] = record
        self._by_hash[record.hash] = record.id

    async def list(self, tenant: str | None = None) -> list[KeyRecord]:
        found = [r for r in self._records.values() if tenant is None or r.tenant == tenant]
        return sorted(found, key=lambda r: (r.created, r.id))

    async def aclose(self) -> None:
        return None
