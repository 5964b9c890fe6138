"""Who is looking at the dashboard, decided once per request from `Authorization: Bearer`:

    admin    the admin token (`admin.token`, compared in constant time): everything, prompt and
             answer text included where the request log kept it
    reader   a gateway key, not revoked, with the `dashboard` role (`KeyPolicySettings.roles`):
             the charts and the request table, never a body
    open     no credential needed: auth off and no admin token (a gateway on a laptop, where
             `/metrics` is open too): as `reader`

Anything else is a 401 the page answers by asking for a token. The pages themselves are static
files with no data; only their JSON is guarded.
"""

from __future__ import annotations

import enum
import hmac
from typing import TYPE_CHECKING

from levergate.errors import AuthenticationFailed

if TYPE_CHECKING:
    from levergate.extension import Host
    from levergate.server.exchange import Request

__all__ = ["DASHBOARD_ROLE", "Viewer", "viewer_of"]

DASHBOARD_ROLE = "dashboard"


class Viewer(enum.StrEnum):
    ADMIN = "admin"
    READER = "reader"
    OPEN = "open"

    @property
    def sees_bodies(self) -> bool:
        return self is Viewer.ADMIN


def _bearer(request: Request) -> str:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


async def viewer_of(host: Host, request: Request) -> Viewer:
    """The viewer, or `AuthenticationFailed`."""
    settings = host.settings
    token = _bearer(request)
    admin = settings.admin.token
    if (
        token
        and admin is not None
        and hmac.compare_digest(token.encode(), admin.get_secret_value().encode())
    ):
        return Viewer.ADMIN
    kit = host.keyring
    if token and kit is not None:
        record = await kit.keyring.resolve(token)
        if record is not None and record.revoked is None and DASHBOARD_ROLE in record.roles:
            return Viewer.READER
    if not settings.auth.enabled and admin is None:
        return Viewer.OPEN
    raise AuthenticationFailed(
        "The dashboard needs 'Authorization: Bearer <admin.token>' or a key with the "
        "'dashboard' role.",
        code="invalid_dashboard_credentials",
    )
