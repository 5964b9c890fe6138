"""Gateway API keys and what they may spend: `auth` (keys, their store, spend counters) and the
admin API."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, SecretStr, StringConstraints, model_validator

from levergate.config.base import _Strict
from levergate.config.local import cache_home
from levergate.config.stores import ConnectionName

# A key's model list is bounded like everything the admin API takes: 1,000 names of 8 KB each
# were once accepted into one key record (8 MB read back on every key lookup that missed the
# cache). Model ids ("org/model-name:tag") are far shorter; no catalog lists 256 aliases.
MAX_KEY_MODELS = 256
MAX_MODEL_NAME_CHARS = 256
ModelName = Annotated[str, StringConstraints(min_length=1, max_length=MAX_MODEL_NAME_CHARS)]


class KeyPolicySettings(_Strict):
    """What one gateway API key may do. `models` are aliases as clients name them ([] = all);
    `rpm`/`tpm` are the key's own rates (the `traffic` limit store, shared by replicas with
    Redis in `stores`); budgets are US dollars per UTC day / calendar month (None = none)."""

    models: tuple[ModelName, ...] = Field((), max_length=MAX_KEY_MODELS)
    # Bounded like every number a client of the admin API sends: finite, and far above any
    # real rate or budget (a budget of `Infinity` would be no budget, said in a misleading way).
    # Numbers only (strict): `true` once made a $1 budget and an rpm of 1, `"5"` an rpm of 5.
    rpm: int | None = Field(None, ge=1, le=1_000_000_000, strict=True)
    tpm: int | None = Field(None, ge=1, le=1_000_000_000_000, strict=True)
    daily_budget_usd: float | None = Field(None, ge=0, le=1e9, allow_inf_nan=False, strict=True)
    monthly_budget_usd: float | None = Field(None, ge=0, le=1e9, allow_inf_nan=False,
                                             strict=True)  # fmt: skip
    # What the key may do besides calling models: `dashboard` reads the dashboard (read-only:
    # no key changes, no prompt text).
    roles: tuple[Literal["dashboard"], ...] = Field((), max_length=4)


class ApiKeySettings(KeyPolicySettings):
    """A key listed in the configuration. It is hashed when the gateway is built and the
    plaintext is not kept beyond that; the admin API can neither rotate nor revoke it (the file
    would bring it back at the next start)."""

    key: SecretStr
    tenant: str = "default"
    name: str = ""


class KeyStoreSettings(_Strict):
    """Where keys created through the admin API live (hashed; see stores/keys.py). `sqlite` is one
    machine's file; `redis` is shared by replicas. The SQLite file is opened only when the admin
    API is on or the file already exists, so a gateway with config keys only writes nothing."""

    # `auto`: what the section's connection offers (redis, then sqlite), else `sqlite`.
    backend: Literal["auto", "memory", "sqlite", "redis"] = "auto"
    # The `stores` connection (None: `stores.default`, when there is one).
    connection: ConnectionName | None = None
    sqlite_path: str = Field(default_factory=lambda: str(Path(cache_home()) / "keys.sqlite3"))
    # Deprecated: set `stores.<connection>.redis_url` (kept for one release).
    redis_url: str = "redis://127.0.0.1:6379/0"
    redis_prefix: str = "levergate:{keys}:"
    # How long a replica trusts a key record it has read. A revocation through another replica
    # takes effect within this; the replica that revoked it forgets the record at once. 5 s
    # keeps key lookups off the store for all but one request per key every 5 s.
    cache_seconds: float = Field(5.0, ge=0)
    timeout_seconds: float = Field(0.5, gt=0)


class SpendSettings(_Strict):
    """Where the money each key spent today and this month is counted. `auto` (the default)
    takes what the section's `stores` connection offers (redis, then sqlite: the keys' file
    in its folder); with no connection it keeps it where the keys are: `redis` with a Redis
    key store, the key store's SQLite file when one is in use, else `memory`. `memory` is per
    process and forgotten at restart; `sqlite` survives restarts on one machine; `redis` is
    shared by every replica, one `INCRBYFLOAT` counter per key and period that expires a day
    after its period ends."""

    backend: Literal["auto", "memory", "sqlite", "redis"] = "auto"
    # The `stores` connection (None: `stores.default`, when there is one).
    connection: ConnectionName | None = None
    # For `sqlite`; None: the key store's file (`auth.store.sqlite_path`).
    sqlite_path: str | None = None
    # Deprecated: set `stores.<connection>.redis_url` (kept for one release).
    redis_url: str = "redis://127.0.0.1:6379/0"
    redis_prefix: str = "levergate:spend:"
    # Redis socket timeouts and the SQLite lock wait: a budget check or charge slower than
    # this is skipped (logged, then the store rests 1 s); budgets go unchecked meanwhile,
    # requests never fail for it, and the charges are owed and written when it answers again.
    timeout_seconds: float = Field(0.5, gt=0)
    # How often what this process owes is written to the store: the delay before another
    # replica sees a charge (this one sees it at once). One write per key and period each time.
    flush_seconds: float = Field(0.5, gt=0)


class AuthSettings(_Strict):
    """When enabled, every /v1 request needs `Authorization: Bearer <key>` of a listed key or one
    in the key store, and the key decides the tenant, the models it may name, its rates and its
    budgets. When disabled, `x-levergate-tenant` may name one."""

    enabled: bool = False
    keys: list[ApiKeySettings] = Field(default_factory=list)
    store: KeyStoreSettings = Field(default_factory=KeyStoreSettings)
    spend: SpendSettings = Field(default_factory=SpendSettings)

    @model_validator(mode="after")
    def _names_unique(self) -> AuthSettings:
        names = [k.name for k in self.keys if k.name]
        if len(names) != len(set(names)):
            raise ValueError("auth.keys: names must be unique (a name is the key's id)")
        return self


class AdminSettings(_Strict):
    """The admin API (/admin/keys: create, list, rotate, revoke, spend), on its own credential
    `Authorization: Bearer <token>`. Off by default: it mints credentials. Set the token with
    `LEVERGATE_ADMIN__TOKEN` rather than in a file. Keys it makes are required only with
    `auth.enabled` (keys can be made before auth is turned on)."""

    enabled: bool = False
    token: SecretStr | None = None

    @model_validator(mode="after")
    def _needs_token(self) -> AdminSettings:
        if self.enabled and (self.token is None or len(self.token.get_secret_value()) < 16):
            raise ValueError("admin.enabled needs admin.token of at least 16 characters")
        return self
