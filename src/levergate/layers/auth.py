"""Authenticate: decides the tenant. With auth on, the caller's bearer key must be one of the
configured keys and the key names the tenant; with auth off, `x-levergate-tenant` may name one.

Sits right under Measure, so refused requests are still counted, and above everything that is
keyed or limited by tenant (caches, limits)."""

from __future__ import annotations

import hashlib
import hmac
from functools import partial

from levergate.config import Auth
from levergate.core.call import Call
from levergate.core.reply import Reply
from levergate.core.service import Layer, Service
from levergate.errors import AuthenticationFailed

TENANT_HEADER = "x-levergate-tenant"


class Authenticate:
    @classmethod
    def layer(cls, settings: Auth) -> Layer:
        return partial(cls, settings=settings)

    def __init__(self, inner: Service, *, settings: Auth) -> None:
        self._inner = inner
        self._enabled = settings.enabled
        # Keys are held as digests: lookups compare digests, never the secrets themselves.
        self._tenants = {_digest(k.key.get_secret_value()): k.tenant for k in settings.keys}

    async def __call__(self, call: Call) -> Reply:
        if self._enabled:
            tenant = self._tenant_for(call.ctx.headers.get("authorization", ""))
            return await self._inner(call.with_ctx(tenant=tenant))
        asked = call.ctx.headers.get(TENANT_HEADER)
        if asked and asked != call.ctx.tenant:
            return await self._inner(call.with_ctx(tenant=asked))
        return await self._inner(call)

    def _tenant_for(self, authorization: str) -> str:
        scheme, _, key = authorization.partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise AuthenticationFailed(
                "Missing API key: send 'Authorization: Bearer <key>'.", code="missing_api_key"
            )
        digest = _digest(key.strip())
        for known, tenant in self._tenants.items():
            if hmac.compare_digest(known, digest):
                return tenant
        raise AuthenticationFailed("Incorrect API key provided.", code="invalid_api_key")


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()
