"""Admission: the tenant's own limits, checked once per request at the front door.

FRONT, right under Authenticate (which decides the tenant) and above the caches: a tenant over
its requests- or tokens-per-minute waits in its own `WaitingRoom` — interactive before default
before batch — and is refused with 429 + Retry-After only when the wait would pass its deadline
(`x-levergate-timeout`, or its priority class's longest wait). Placed above the caches, a cache
hit still counts against the tenant's request rate, which keeps a tenant's quota meaning "what
you may ask", independent of what we happen to have cached.

Refused requests never reach an upstream. A request whose deadline has already passed is
refused at once, before any other lever spends work on it.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import TYPE_CHECKING

from levergate.config import MaxWaitSettings, RateLimitsSettings, TrafficSettings
from levergate.core.call import Call
from levergate.core.clock import Clock
from levergate.core.reply import Completed, Ended, Reply, Watcher
from levergate.core.service import Layer, Service
from levergate.errors import LevergateError, RateLimited
from levergate.layers.traffic.limits import LimitScope
from levergate.layers.traffic.metrics import TrafficMetrics
from levergate.layers.traffic.waiting import Slots, WaitingRoom, deadline_for
from levergate.policies.estimate import reserved_tokens
from levergate.stores.limits import LimitStore

if TYPE_CHECKING:
    from levergate.layers.shared import Shared

_MAX_ROOMS = 10_000  # idle tenant rooms are dropped beyond this (tenant names come from clients)


class Admission:
    @classmethod
    def layer(cls, settings: TrafficSettings, *, shared: Shared) -> Layer | None:
        """None when no tenant has any limit."""
        if not settings.tenants and settings.tenant_default is None:
            return None
        return partial(
            cls, tenants=settings.tenants, default=settings.tenant_default,
            store=shared.traffic.store, clock=shared.clock, max_wait=settings.max_wait,
            max_queue=settings.max_queue, metrics=shared.traffic.metrics,
        )  # fmt: skip

    def __init__(
        self,
        inner: Service,
        *,
        tenants: Mapping[str, RateLimitsSettings],
        default: RateLimitsSettings | None,
        store: LimitStore,
        clock: Clock,
        max_wait: MaxWaitSettings,
        max_queue: int,
        metrics: TrafficMetrics,
    ) -> None:
        self._inner = inner
        self._limits = dict(tenants)
        self._default = default
        self._store = store
        self._clock = clock
        self._max_wait = max_wait
        self._max_queue = max_queue
        self._metrics = metrics
        self._rooms: dict[str, tuple[WaitingRoom, LimitScope]] = {}
        metrics.tenant_queued.set_function(self._queued)

    def _queued(self) -> float:
        """Requests waiting in every tenant's room, read when the registry is collected (from
        /metrics' worker thread too: a copy of the rooms, then plain reads)."""
        return float(sum(room.queued for room, _ in tuple(self._rooms.values())))

    async def __call__(self, call: Call) -> Reply:
        ctx = call.ctx
        now = self._clock.now()
        priority = ctx.controls.priority.name.lower()
        if ctx.controls.deadline is not None and ctx.controls.deadline <= now:
            self._metrics.shed.labels("tenant", priority, "expired").inc()
            raise RateLimited(
                "The request's deadline passed before it could be served.",
                code="deadline_exceeded",
                retry_after=1.0,
            )
        found = self._room(ctx.principal.tenant)
        if found is None:
            return await self._inner(call)
        room, scope = found
        charges = scope.charges(reserved_tokens(call.body, embedding=call.kind == "embedding"))
        wait = getattr(self._max_wait, priority)
        deadline = deadline_for(ctx_deadline=ctx.controls.deadline, priority_wait=wait, now=now)
        await room.enter(charges=charges, priority=int(ctx.controls.priority), deadline=deadline)
        waited = self._clock.now() - now
        self._metrics.wait.labels("tenant", priority).observe(waited)
        ctx.trace.queued_seconds += waited
        try:
            reply = await self._inner(call)
        except BaseException:
            room.release()
            raise
        if isinstance(reply, Completed):
            room.release()
            return reply
        return reply.watch(_Releasing(room))

    def _room(self, tenant: str) -> tuple[WaitingRoom, LimitScope] | None:
        found = self._rooms.get(tenant)
        if found is not None:
            return found
        limits = self._limits.get(tenant, self._default)
        if limits is None:
            return None
        if len(self._rooms) >= _MAX_ROOMS:
            for name in [n for n, (r, _) in self._rooms.items() if r.idle]:
                del self._rooms[name]
        slots = []
        if limits.max_concurrency is not None:
            cap = limits.max_concurrency
            slots.append(Slots(lambda: cap))
        room = WaitingRoom(
            store=self._store,
            clock=self._clock,
            slots=slots,
            max_queue=self._max_queue,
            shed_error=lambda why, after: self._refuse(tenant, why, after),
        )
        found = (room, LimitScope.of(f"tenant:{tenant}", limits))
        self._rooms[tenant] = found
        return found

    def _refuse(self, tenant: str, why: str, retry_after: float) -> LevergateError:
        self._metrics.shed.labels("tenant", "-", why).inc()
        return RateLimited(
            f"Tenant '{tenant}' is over its rate limit; retry after {retry_after:.1f}s.",
            code="tenant_rate_limited",
            retry_after=retry_after,
        )


class _Releasing(Watcher):
    """A streamed answer holds the tenant's slot until it ends."""

    __slots__ = ("_room",)

    def __init__(self, room: WaitingRoom) -> None:
        self._room = room

    async def end(self, ended: Ended) -> None:
        del ended
        self._room.release()
