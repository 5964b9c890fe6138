"""Authenticate: decides the tenant. With auth on, the caller's bearer key must be one the
`Keyring` knows (listed in `auth.keys`, or made through the admin API) and not revoked, sent as
`Authorization: Bearer <key>` or (the anthropic SDK's way) `x-api-key: <key>`; the key
names the tenant, the models it may ask for, and its rates and budgets (`KeyQuota`). With auth
off, the client may name one. The rule is `levergate.principal.identify`, the one every route uses.

Sits right under Measure, so refused requests are still counted, and above everything that is
keyed or limited by tenant (caches, limits).

    no / unknown / revoked key      401 invalid_api_key (missing_api_key with no key at all)
    model not in the key's list     403 model_not_allowed
    key over its RPM / TPM          429 key_rate_limited (after waiting within its deadline)
    key's budget spent              429 budget_exceeded (type insufficient_quota)
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from levergate.config import AuthSettings
from levergate.core.call import Call
from levergate.core.clock import SystemClock
from levergate.core.reply import Reply
from levergate.core.service import Answer, Layer, Service
from levergate.errors import PermissionDenied
from levergate.layers.keys.keyring import Keyring
from levergate.layers.keys.quota import KeyQuota
from levergate.principal import identify, unauthenticated

if TYPE_CHECKING:
    from levergate.layers.shared import Shared


class Authenticate:
    @classmethod
    def layer(cls, settings: AuthSettings, *, shared: Shared) -> Layer:
        """Always present: with auth off it still names the tenant (`identify`)."""
        keys = shared.keys
        if keys is None:
            return partial(cls, settings=settings)
        return partial(cls, settings=settings, keyring=keys.keyring, quota=keys.quota)

    def __init__(
        self,
        inner: Service,
        *,
        settings: AuthSettings,
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

    def __call__(self, call: Call) -> Answer:
        if self._enabled:
            return self._authenticated(call)
        # Auth off: the tenant the client names, if any; no key, so nothing to check or await.
        ctx = call.ctx
        principal = unauthenticated(ctx.headers, given=ctx.principal)
        ctx.trace.tenant, ctx.trace.key_id = principal.tenant, principal.key_id
        if principal is not ctx.principal and principal != ctx.principal:
            call = call.with_ctx(principal=principal)
        return self._inner(call)

    async def _authenticated(self, call: Call) -> Reply:
        ctx = call.ctx
        found = await identify(
            ctx.headers, keyring=self._keyring, auth_on=self._enabled, known=ctx.key,
            given=ctx.principal,
        )  # fmt: skip
        principal, record = found.principal, found.key
        # On the record only once established: Measure spends no label on a refused caller.
        ctx.trace.tenant, ctx.trace.key_id = principal.tenant, principal.key_id
        if record is not None and not record.allows(call.model):
            raise PermissionDenied(
                f"This API key may not use the model '{call.model}'.",
                code="model_not_allowed",
                param="model",
            )
        if principal != ctx.principal:
            call = call.with_ctx(principal=principal)
        if record is None or self._quota is None:
            return await self._inner(call)
        return await self._quota.serve(record, call, self._inner)
