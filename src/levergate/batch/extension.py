"""The Batch API as one feature on the `Host` seam (levergate/extension.py): the service and its
runner, deferral to provider batch APIs and async requests (when their settings are on), their
background jobs and their routes. `levergate.app.build_gateway` adds it when `batch.enabled`;
nothing in the core names it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from levergate.batch.http import AsyncRoutes, FilesAndBatches
from levergate.batch.service import BatchService
from levergate.core.jobs import BackgroundJob
from levergate.extension import extension_of

if TYPE_CHECKING:
    from levergate.core.clock import Clock
    from levergate.extension import Host
    from levergate.server.route import Divert, Route


class BatchExtension:
    def __init__(self, host: Host, *, clock: Clock | None = None) -> None:
        self.service = BatchService(host, clock=clock)
        found = self.service.async_requests
        self._async = AsyncRoutes(found) if found is not None else None

    def jobs(self) -> list[BackgroundJob]:
        """The runner, the expired-file sweeper, and the webhook workers when async requests
        are on."""
        service = self.service
        found = [BackgroundJob("batch-runner", service.runner.run),
                 BackgroundJob("batch-sweeper", service.sweeper.run)]  # fmt: skip
        if service.async_requests is not None:
            found.append(BackgroundJob("webhooks", service.async_requests.deliveries.run))
        return found

    def routes(self) -> list[Route]:
        found = FilesAndBatches(self.service).routes()
        if self._async is not None:
            found += self._async.routes()
        return found

    def diverts(self) -> list[Divert]:
        return self._async.diverts() if self._async is not None else []

    async def aclose(self) -> None:
        await self.service.aclose()


def batch_extension(host: Host) -> BatchExtension:
    """The factory `Gateway(extensions=...)` calls with itself."""
    return BatchExtension(host)


def service_of(extensions: Iterable[object]) -> BatchService | None:
    """The Batch API's service among a gateway's extensions (`gateway.extensions`), if on."""
    found = extension_of(extensions, BatchExtension)
    return None if found is None else found.service
