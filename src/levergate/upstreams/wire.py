"""The seam between the OpenAI-compatible upstream and whichever HTTP client carries it.

Every client raises only `TransportFailed` for a connection that failed or broke, so the
upstream maps one exception to the error tree, whatever the library underneath.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Protocol


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
