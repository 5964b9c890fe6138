"""Authenticate: decides the tenant. With auth on, the caller's bearer key must be one of the
configured keys and the key names the tenant; with auth off, `x-levergate-tenant` may name one.

Sits right under Measure, so refused requests are still counted, and above everything that is
keyed or limited by tenant (caches, limits)."""

from __future__ import annotations

import hashlib
import hmac

from levergate.config import Auth
from levergate.core.call import Call
from levergate.core.reply import Reply
from levergate.core.service import Service
from levergate.errors import AuthenticationFailed

TENANT_HEADER = "x-levergate-tenant"


class Authenticate:
    def __init__(self, inner: Service, *, settings: Auth) -> None:
        self._inner = inner
        self._keys = KeyRing(settings)

    async def __call__(self, call: Call) -> Reply:
        if self._keys.enabled:
            tenant = self._keys.tenant_for(call.ctx.headers.get("authorization", ""))
            return await self._inner(call.with_ctx(tenant=tenant))
        asked = call.ctx.headers.get(TENANT_HEADER)
        if asked and asked != call.ctx.tenant:
            return await self._inner(call.with_ctx(tenant=asked))
        return await self._inner(call)


class KeyRing:
    """The configured client keys. Used by `Authenticate` for calls and by the edge's guards
    (`server.guards`) for routes that run no call (`/v1/models`), so both accept the same keys."""

    __slots__ = ("_tenants", "enabled")

    def __init__(self, settings: Auth) -> None:
        self.enabled = settings.enabled
        # Keys are held as digests: lookups compare digests, never the secrets themselves.
        self._tenants = {digest(k.key.get_secret_value()): k.tenant for k in settings.keys}

    def tenant_for(self, authorization: str) -> str:
        """The tenant of `Authorization: Bearer <key>`; AuthenticationFailed if none matches."""
        key = bearer(authorization)
        if not key:
            raise AuthenticationFailed(
                "Missing API key: send 'Authorization: Bearer <key>'.", code="missing_api_key"
            )
        wanted = digest(key)
        for known, tenant in self._tenants.items():
            if hmac.compare_digest(known, wanted):
                return tenant
        raise AuthenticationFailed("Incorrect API key provided.", code="invalid_api_key")


def bearer(authorization: str) -> str:
    """The key of `Authorization: Bearer <key>`, '' if the header is missing or another scheme."""
    scheme, _, key = authorization.partition(" ")
    return key.strip() if scheme.lower() == "bearer" else ""


def matches(secret: str, *, expected: bytes) -> bool:
    """Whether `secret` is the secret `expected` is the digest of, in constant time."""
    return hmac.compare_digest(digest(secret), expected)


def digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()
