"""The dashboard as a feature on the `Host` seam (levergate/extension.py): routes only, no
background job. It reads the request log through that feature's reader (`log_of` the gateway's
extensions, looked up per request: the log is built beside it) and the gateway's metrics through
the recorder's registry. `levergate.app.build_gateway` adds it when `dashboard.enabled`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from levergate.requestlog.extension import RequestLog, log_of

if TYPE_CHECKING:
    from levergate.core.jobs import BackgroundJob
    from levergate.extension import Host
    from levergate.server.route import Divert, Route

__all__ = ["Dashboard", "dashboard_extension"]


class Dashboard:
    def __init__(self, host: Host) -> None:
        self.host = host

    def log(self) -> RequestLog | None:
        """The request log, when the gateway keeps one."""
        return log_of(self.host.extensions)

    def jobs(self) -> Sequence[BackgroundJob]:
        return []

    def routes(self) -> list[Route]:
        from levergate.dashboard.http import routes

        return routes(self)

    def diverts(self) -> list[Divert]:
        return []

    async def aclose(self) -> None:
        return None


def dashboard_extension(host: Host) -> Dashboard:
    """The factory `Gateway(extensions=...)` calls with itself."""
    return Dashboard(host)
