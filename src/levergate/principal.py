"""The one tenant rule: who a request is for, decided by `identify` for every route — the
pipeline's Authenticate layer (routes that run a call), the `client_key` guard (routes that run
none: models, files, batches, async requests, stored responses) and so every handler.

    auth on    the presented key (`Authorization: Bearer <key>`, else `x-api-key: <key>`) must
               be one the keyring knows and not revoked: 401 otherwise; the key names the
               tenant, and its id goes on the record (never the key)
    auth off   `x-levergate-tenant` names the tenant (1-128 of A-Z a-z 0-9 . _ : @ -: it keys
               caches, limits, stores and metrics labels; anything else is a 400), else the
               context's own (a batch line's), else "default"
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from levergate.core.controls import ANONYMOUS, Principal
from levergate.errors import AuthenticationFailed, BadRequest

if TYPE_CHECKING:
    from levergate.layers.keys.keyring import Keyring
    from levergate.stores.keys import KeyRecord

TENANT_HEADER = "x-levergate-tenant"
# Where the anthropic SDK sends its key; accepted like `Authorization: Bearer` on every route.
API_KEY_HEADER = "x-api-key"
MISSING_KEY = "Missing API key: send 'Authorization: Bearer <key>' or 'x-api-key: <key>'."
MAX_TENANT_CHARS = 128
_TENANT = re.compile(rf"[A-Za-z0-9._:@-]{{1,{MAX_TENANT_CHARS}}}")


@dataclass(frozen=True, slots=True)
class Identity:
    """What `identify` decided: the principal, and with auth on the key's record (its models,
    rates and budgets are what Authenticate and the handlers check next)."""

    principal: Principal
    key: KeyRecord | None = None


async def identify(
    headers: Mapping[str, str],
    *,
    keyring: Keyring | None,
    auth_on: bool,
    known: KeyRecord | None = None,
    given: Principal = ANONYMOUS,
) -> Identity:
    """The caller of a request with these (lower-cased) headers. `known` is a key already
    established in-process (a batch line runs as the key that made its batch), checked instead
    of a presented one; `given` the principal the context already names (auth off)."""
    if not auth_on:
        return Identity(unauthenticated(headers, given=given))
    record = known
    if record is None:
        key = presented_key(headers)
        if not key:
            raise AuthenticationFailed(MISSING_KEY, code="missing_api_key")
        record = None if keyring is None else await keyring.resolve(key)
    if record is None or record.revoked is not None:
        # One answer for both: a revoked key is no more a key than a made-up one.
        raise AuthenticationFailed("Incorrect API key provided.", code="invalid_api_key")
    return Identity(Principal(tenant=record.tenant, key_id=record.id), record)


def unauthenticated(headers: Mapping[str, str], *, given: Principal = ANONYMOUS) -> Principal:
    """The caller with auth off: the tenant it names, else `given`. Synchronous, so the
    pipeline's Authenticate awaits nothing with auth off (issue 22)."""
    claimed = headers.get(TENANT_HEADER)
    return given if claimed is None else Principal(tenant=tenant_of(claimed))


def tenant_of(text: str) -> str:
    """A tenant name a client claims, checked against the one bound every route applies."""
    if _TENANT.fullmatch(text) is None:
        raise BadRequest(
            f"'{TENANT_HEADER}' must be 1 to {MAX_TENANT_CHARS} of A-Z a-z 0-9 . _ : @ -.",
            code="invalid_header_value",
            param=TENANT_HEADER,
        )
    return text


def presented_key(headers: Mapping[str, str]) -> str:
    """The client's key: `Authorization: Bearer <key>`, else `x-api-key: <key>`; '' for none."""
    scheme, _, key = headers.get("authorization", "").partition(" ")
    key = key.strip() if scheme.lower() == "bearer" else ""
    return key or headers.get(API_KEY_HEADER, "").strip()
