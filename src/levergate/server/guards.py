"""Who may call a route that runs no `Call` (routes.py: `guard=`). Routes that run a call are
guarded by the pipeline's `Authenticate` layer instead, which also counts refused requests.

- `client_key`: with auth on, a client key `Authenticate` would accept (listed in `auth.keys`
  or made through the admin API, not revoked; as a bearer token or in `x-api-key`);
  `/v1/models` then lists only the aliases that key may use.
- `metrics_token`: with auth on, `metrics.token` and nothing else (`/metrics` names every
  tenant's features, models and spend); no token configured means closed (`config.Metrics`).

Both are open with auth off. The admin API has its own (`server.admin.admin_token`). A guard
raises `AuthenticationFailed` (401) or returns.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import TYPE_CHECKING

from levergate.errors import AuthenticationFailed
from levergate.layers.auth import MISSING_KEY, presented_key

if TYPE_CHECKING:
    from levergate.gateway import Gateway
    from levergate.server.edge import Edge
    from levergate.server.exchange import Request


class Credentials:
    """What the guards check against, built once per edge: the gateway's own keyring (the one
    `Authenticate` uses) and the digest of `metrics.token`."""

    __slots__ = ("auth_on", "keyring", "metrics")

    def __init__(self, gateway: Gateway) -> None:
        settings = gateway.settings
        self.auth_on = settings.auth.enabled
        # With auth on the pipeline always has its keys (layers/keys/build.py); off, no guard
        # asks for them.
        kit = gateway.pipeline.keys
        self.keyring = kit.keyring if kit is not None else None
        token = settings.metrics.token
        self.metrics = None if token is None else _digest(token.get_secret_value())


async def client_key(edge: Edge, request: Request) -> None:
    """With auth on, a valid key (401 otherwise), kept on `request.key` for the handler."""
    credentials = edge.credentials
    if not credentials.auth_on:
        return
    key = presented_key(request.headers)
    if not key:
        raise AuthenticationFailed(MISSING_KEY, code="missing_api_key")
    if credentials.keyring is None:  # auth on without keys: unreachable, refuse all the same
        raise AuthenticationFailed("Incorrect API key provided.", code="invalid_api_key")
    record = await credentials.keyring.resolve(key)
    if record is None or record.revoked is not None:
        raise AuthenticationFailed("Incorrect API key provided.", code="invalid_api_key")
    request.key = record


async def metrics_token(edge: Edge, request: Request) -> None:
    credentials = edge.credentials
    if not credentials.auth_on:
        return
    if credentials.metrics is None:
        raise AuthenticationFailed(
            "/metrics is closed: auth is on and no metrics.token is configured.",
            code="metrics_token_not_configured",
        )
    token = _bearer(request.headers.get("authorization", ""))
    if not token or not hmac.compare_digest(_digest(token), credentials.metrics):
        raise AuthenticationFailed(
            "/metrics needs 'Authorization: Bearer <metrics.token>'.", code="invalid_metrics_token"
        )


def _bearer(authorization: str) -> str:
    """The key of `Authorization: Bearer <key>`, '' if the header is missing or another scheme."""
    scheme, _, key = authorization.partition(" ")
    return key.strip() if scheme.lower() == "bearer" else ""


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()
