"""Authenticate: decides the tenant. With auth on, the caller's bearer key must be one the
`Keyring` knows (listed in `auth.keys`, or made through the admin API) and not revoked, sent as
`Authorization: Bearer <key>` or (the anthropic SDK's way) `x-api-key: <key>`; the key
names the tenant, the models it may ask for, and its rates and budgets (`KeyQuota`). With auth
off, `x-levergate-tenant` may name one.

Sits right under Measure, so refused requests are still counted, and above everything that is
keyed or limited by tenant (caches, limits).

    no / unknown / revoked key      401 invalid_api_key (missing_api_key with no key at all)
    model not in the key's list     403 model_not_allowed
    key over its RPM / TPM          429 key_rate_limited (after waiting within its deadline)
    key's budget spent              429 budget_exceeded (type insufficient_quota)
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import TYPE_CHECKING

from levergate.config import Auth
from levergate.core.call import Call
from levergate.core.clock import SystemClock
from levergate.core.reply import Reply
from levergate.core.service import Layer, Service
from levergate.errors import AuthenticationFailed, PermissionDenied
from levergate.layers.keys.keyring import Keyring
from levergate.layers.keys.quota import KeyQuota
from levergate.stores.keys import KeyRecord

if TYPE_CHECKING:
    from levergate.layers.shared import Shared

TENANT_HEADER = "x-levergate-tenant"
# Where the anthropic SDK sends its key; accepted like `Authorization: Bearer` on every route.
API_KEY_HEADER = "x-api-key"
MISSING_KEY = "Missing API key: send 'Authorization: Bearer <key>' or 'x-api-key: <key>'."


class Authenticate:
    @classmethod
    def layer(cls, settings: Auth, *, shared: Shared) -> Layer:
        """Always present: with auth off it still names the tenant from `x-levergate-tenant`."""
        keys = shared.keys
        if keys is None:
            return partial(cls, settings=settings)
        return partial(cls, settings=settings, keyring=keys.keyring, quota=keys.quota)

    def __init__(
        self,
        inner: Service,
        *,
        settings: Auth,
        keyring: Keyring | None = None,
        quota: KeyQuota | None = None,
    ) -> None:
        self._inner = inner
        self._enabled = settings.enabled
        # Without a keyring of its own (unit tests, library users) the configured keys only.
        self._keyring = keyring or Keyring(
            config_keys=settings.keys,
            store=None,
            clock=SystemClock(),
            cache_seconds=0.0,
            timeout=1.0,
        )
        self._quota = quota

    async def __call__(self, call: Call) -> Reply:
        if self._enabled:
            return await self._authenticated(call)
        tenant = call.ctx.headers.get(TENANT_HEADER) or call.ctx.tenant
        # On the record only once established: Measure spends no label on a refused caller.
        call.ctx.trace.tenant = tenant
        if tenant != call.ctx.tenant:
            call = call.with_ctx(tenant=tenant)
        return await self._inner(call)

    async def _authenticated(self, call: Call) -> Reply:
        record = call.ctx.key if call.ctx.key is not None else await self._presented(call)
        if record is None or record.revoked is not None:
            # One answer for both: a revoked key is no more a key than a made-up one.
            raise AuthenticationFailed("Incorrect API key provided.", code="invalid_api_key")
        call.ctx.trace.tenant, call.ctx.trace.key_id = record.tenant, record.id
        if not record.allows(call.model):
            raise PermissionDenied(
                f"This API key may not use the model '{call.model}'.",
                code="model_not_allowed",
                param="model",
            )
        call = call.with_ctx(tenant=record.tenant)
        if self._quota is None:
            return await self._inner(call)
        return await self._quota.serve(record, call, self._inner)

    async def _presented(self, call: Call) -> KeyRecord | None:
        """The record of the key the request carries (None: no such key)."""
        key = presented_key(call.ctx.headers)
        if not key:
            raise AuthenticationFailed(MISSING_KEY, code="missing_api_key")
        return await self._keyring.resolve(key)


def presented_key(headers: Mapping[str, str]) -> str:
    """The client's key: `Authorization: Bearer <key>`, else `x-api-key: <key>`; '' for none."""
    scheme, _, key = headers.get("authorization", "").partition(" ")
    key = key.strip() if scheme.lower() == "bearer" else ""
    return key or headers.get(API_KEY_HEADER, "").strip()
