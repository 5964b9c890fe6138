"""The request log as a feature on the `Host` seam (levergate/extension.py): it observes the
recorder (every finished request, whichever path it came by), writes the records from its
supervised background job (requestlog/writer.py) and serves them at `GET /admin/log` and
`GET /admin/log/summary` (requestlog/http.py). `levergate.app.build_gateway` adds it when
`request_log.enabled`; nothing in the core names it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

from levergate.core.jobs import BackgroundJob
from levergate.errors import Overloaded
from levergate.extension import extension_of
from levergate.requestlog.store import LogStore, LogStoreError, open_store
from levergate.requestlog.writer import BodyText, LogMetrics, LogWriter
from levergate.stores import select

if TYPE_CHECKING:
    from levergate.config import Settings
    from levergate.extension import Host
    from levergate.server.route import Divert, Route

__all__ = ["LogReader", "RequestLog", "request_log_extension", "store_for"]

T = TypeVar("T")


def store_for(settings: Settings) -> LogStore:
    """The log store `settings` name (`request_log.store`, through `stores`)."""
    choice = select.request_log(settings)
    s = settings.request_log.store
    address = choice.address or s.sqlite_path
    return open_store(choice.backend, address, timeout_seconds=s.timeout_seconds,
                      batch_size=settings.request_log.batch_size)  # fmt: skip


class LogReader:
    """The log's queries from the event loop, each run on the reader's own thread and store
    (the writer's never waits on a reader). A store that cannot answer is a 503."""

    def __init__(self, store: LogStore) -> None:
        self.store = store
        self._closed = False
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="levergate-log-read")

    async def run(self, query: Callable[[LogStore], T]) -> T:
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, query, self.store)
        except LogStoreError as exc:
            raise Overloaded(f"The request log cannot be read now: {exc}",
                             code="log_store_unavailable", retry_after=5.0) from None  # fmt: skip

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            await asyncio.get_running_loop().run_in_executor(self._executor, self.store.close)
            self._executor.shutdown(wait=False)


class RequestLog:
    def __init__(self, host: Host) -> None:
        settings = host.settings
        s = settings.request_log
        metrics = LogMetrics(host.recorder.telemetry.registry)
        self.settings = s
        self.writer = LogWriter(store_for(settings), settings=s, metrics=metrics,
                                bodies=BodyText(s.bodies, host.redactor),
                                clock=host.clock)  # fmt: skip
        self.reader = LogReader(store_for(settings))
        host.recorder.observe(self.writer)
        if s.shadow_labels:
            host.recorder.shadow_labels.listen(self.writer.labelled)

    def jobs(self) -> Sequence[BackgroundJob]:
        return [BackgroundJob("request-log", self.writer.run)]

    def routes(self) -> list[Route]:
        from levergate.requestlog.http import routes

        return routes(self)

    def diverts(self) -> list[Divert]:
        return []

    async def aclose(self) -> None:
        await self.writer.aclose()
        await self.reader.aclose()


def request_log_extension(host: Host) -> RequestLog:
    """The factory `Gateway(extensions=...)` calls with itself."""
    return RequestLog(host)


def log_of(extensions: Sequence[Any]) -> RequestLog | None:
    """The request log among a gateway's extensions (`gateway.extensions`), if on."""
    return extension_of(extensions, RequestLog)
