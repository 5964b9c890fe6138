"""Who may call a route that runs no `Call` (routes.py: `guard=`). Routes that run a call are
guarded by the pipeline's `Authenticate` layer instead, which also counts refused requests.

- `client_key`: the caller as `Authenticate` decides it, by the same `identify`: with auth on,
  a client key it would accept (listed in `auth.keys` or made through the admin API, not
  revoked; as a bearer token or in `x-api-key`), and `/v1/models` then lists only the aliases
  that key may use; with auth off, the tenant the client names (or "default").
- `metrics_token`: with auth on, `metrics.token` and nothing else (`/metrics` names every
  tenant's features, models and spend); no token configured means closed (`config.MetricsSettings`).

Both let every caller in with auth off.
- `admin_token`: the admin API's own credential, `Authorization: Bearer <admin.token>`
  (constant-time), apart from the client keys; every `/admin/...` route, the core's and the
  features' (the request log's `GET /admin/log`); with no admin token set, a 404 like any
  unknown path.
A guard raises `AuthenticationFailed` (401) or returns.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import TYPE_CHECKING

from levergate.core.controls import Principal
from levergate.errors import AuthenticationFailed, NotFound
from levergate.principal import identify

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
        kit = gateway.keyring
        self.keyring = kit.keyring if kit is not None else None
        token = settings.metrics.token
        self.metrics = None if token is None else _digest(token.get_secret_value())


async def client_key(edge: Edge, request: Request) -> None:
    """The caller, by the one rule (`levergate.principal.identify`): with auth on a valid key
    (401 otherwise), kept on `request.key`; the principal on `request.principal` either way."""
    credentials = edge.credentials
    found = await identify(request.headers, keyring=credentials.keyring,
                           auth_on=credentials.auth_on)  # fmt: skip
    request.principal, request.key = found.principal, found.key


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


def caller(request: Request) -> Principal:
    """Who the request is for, as the route's `client_key` guard identified it (the pipeline's
    Authenticate decides it by the same rule: levergate/principal.py)."""
    if request.principal is None:  # every route here is guarded; unreachable, refuse all the same
        raise AuthenticationFailed("The caller was not identified.", code="invalid_api_key")
    return request.principal


async def admin_token(edge: Edge, request: Request) -> None:
    """The guard of every admin route: `Authorization: Bearer <admin.token>` or a 401."""
    token = edge.gateway.settings.admin.token
    if token is None:
        raise NotFound("Unknown path.", code="unknown_url")
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    expected = token.get_secret_value().encode()
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), expected):
        raise AuthenticationFailed("Incorrect admin token.", code="invalid_admin_token")
