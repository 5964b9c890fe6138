"""Who may call a route that runs no `Call` (routes.py: `guard=`). Routes that run a call are
guarded by the pipeline's `Authenticate` layer instead, which also counts refused requests.

- `client_key`: with auth on, a client key, the same ones `Authenticate` accepts (`/v1/models`:
  the model list names every configured alias).
- `metrics_token`: with auth on, `metrics.token` and nothing else (`/metrics` names every
  tenant's features, models and spend); no token configured means closed (config.py: Metrics).

Both are open with auth off. A guard raises `AuthenticationFailed` (401) or returns.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from levergate.config import Settings
from levergate.errors import AuthenticationFailed
from levergate.layers.auth import KeyRing, bearer, digest, matches

if TYPE_CHECKING:
    from levergate.server.edge import Edge
    from levergate.server.exchange import Request


class Credentials:
    """The credentials the guards check, built once from the settings."""

    __slots__ = ("auth_on", "client_keys", "metrics")

    def __init__(self, settings: Settings) -> None:
        self.auth_on = settings.auth.enabled
        self.client_keys = KeyRing(settings.auth)
        token = settings.metrics.token
        self.metrics = None if token is None else digest(token.get_secret_value())


def client_key(edge: Edge, request: Request) -> None:
    if edge.credentials.auth_on:
        edge.credentials.client_keys.tenant_for(request.headers.get("authorization", ""))


def metrics_token(edge: Edge, request: Request) -> None:
    credentials = edge.credentials
    if not credentials.auth_on:
        return
    if credentials.metrics is None:
        raise AuthenticationFailed(
            "/metrics is closed: auth is on and no metrics.token is configured.",
            code="metrics_token_not_configured",
        )
    token = bearer(request.headers.get("authorization", ""))
    if not token or not matches(token, expected=credentials.metrics):
        raise AuthenticationFailed(
            "/metrics needs 'Authorization: Bearer <metrics.token>'.", code="invalid_metrics_token"
        )
