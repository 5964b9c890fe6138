"""Fair admission of large request bodies at the edge (`server.large_requests`).

The gateway serves every tenant on one event loop, and what a request costs the loop grows
with its body: a multi-megabyte JSON body is parsed, fingerprinted, counted, re-encoded and
sent upstream whole, each step holding the loop. Measured in the soak (benchmarks/soak.py),
a hostile tenant's large requests at several at a time made the other tenant's small requests
wait behind them. So a request the edge can tell is large before reading its body (its
`content-length` at least `min_bytes`, or chunked with no length) waits for a slot of its
tenant's (policies/fair_queue.py: a cap per tenant and in all, freed slots to the tenant
holding fewest, in turn); small requests never wait. The tenant is the caller as
`Authenticate` will decide it (levergate/principal.py), so a key that is not one is answered
401 here, before its body is read.

The slot is held while the handler reads the body and builds its answer; a streamed answer's
body, and a whole answer's bytes, go out after it is given back. One `LargeRequests` per edge:
after a reload, requests still running on the old edge hold the old one's slots.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

from levergate.config import LargeRequestSettings
from levergate.errors import RateLimited
from levergate.policies.fair_queue import FairQueue, Full

Ticket = asyncio.Future[None]


class LargeRequests:
    def __init__(self, settings: LargeRequestSettings) -> None:
        self.settings = settings
        self.min_bytes = settings.min_bytes
        self._queue: FairQueue[Ticket] = FairQueue(
            total=settings.in_flight,
            per_tenant=settings.per_tenant,
            waiting=settings.waiting_per_tenant,
        )

    def is_large(self, headers: Mapping[str, str]) -> bool:
        """Whether the declared body is large (a chunked body declares nothing: it may be)."""
        declared = headers.get("content-length")
        if declared is None or not declared.isdigit():
            return "transfer-encoding" in headers
        return int(declared) >= self.min_bytes

    @asynccontextmanager
    async def slot(self, tenant: str) -> AsyncIterator[None]:
        """Hold one of `tenant`'s slots for the block, waiting for it in turn; a 429 when the
        tenant already has its bound of requests waiting."""
        ticket: Ticket = asyncio.get_running_loop().create_future()
        try:
            runs = self._queue.arrive(tenant, ticket)
        except Full:
            raise RateLimited(
                "Too many large requests of this tenant are waiting; retry after a moment.",
                code="too_many_large_requests",
                retry_after=1.0,
            ) from None
        if not runs:
            try:
                await ticket
            except asyncio.CancelledError:
                # Given up while waiting, or granted just as it was: give the slot back.
                if not self._queue.withdraw(tenant, ticket):
                    self._leave(tenant)
                raise
        try:
            yield
        finally:
            self._leave(tenant)

    def _leave(self, tenant: str) -> None:
        for granted in self._queue.leave(tenant):
            if not granted.done():
                granted.set_result(None)

    def held(self) -> int:
        """Slots held now (for tests and metrics)."""
        return self._queue.held()
