"""The seam between the OpenAI-compatible upstream and whichever HTTP client carries it.

Every client raises only `TransportFailed` for a connection that failed or broke, so the
upstream maps one exception to the error tree, whatever the library underneath.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from typing import Protocol

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector


class TransportFailed(Exception):
    """The connection failed or broke (refused, reset, cut body). Both clients raise only this,
    so the upstream maps one exception, whatever the client library."""


class HttpResponse(Protocol):
    status: int
    headers: Mapping[str, str]

    async def read(self) -> bytes: ...

    def chunks(self) -> AsyncIterator[bytes]: ...

    async def aclose(self) -> None: ...


class HttpClient(Protocol):
    async def request(
        self, method: str, url: str, *, body: bytes | None, headers: Mapping[str, str]
    ) -> HttpResponse:
        """Send a request and return once the response head has arrived."""
        ...

    async def aclose(self) -> None: ...


class WireCounts(Collector):
    """Events of the wire no request sees, by upstream, read when /metrics is collected (plain
    numbers the loop writes, so a request pays nothing for them): connections closed for bytes
    no request asked for (`H1Client.unsolicited`: a server out of step with its connection).
    `clients` are (upstream name, the transport's client, if it has one) pairs."""

    def __init__(self, clients: Iterable[tuple[str, object]]) -> None:
        self.clients = tuple(clients)

    def describe(self) -> Iterator[CounterMetricFamily]:
        return iter([self._family()])

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = self._family()
        totals: dict[str, int] = {}
        for name, client in self.clients:
            count = getattr(client, "unsolicited", None)
            if isinstance(count, int):
                totals[name] = totals.get(name, 0) + count
        for name, count in totals.items():
            family.add_metric([name], count)
        return iter([family])

    @staticmethod
    def _family() -> CounterMetricFamily:
        return CounterMetricFamily(
            "levergate_upstream_unsolicited",
            "Upstream connections closed for bytes no request asked for.",
            labels=["upstream"],
        )
