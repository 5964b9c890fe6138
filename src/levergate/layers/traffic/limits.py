"""Limits: requests per minute, tokens per minute and concurrency of one endpoint key.

PER ENDPOINT, right above the transport, so permits are held only while the provider works
and every attempt — retries included — is counted against the provider's limit. Over a limit
the call waits in the endpoint's `WaitingRoom` (priority order, bounded by its deadline) instead
of becoming a 429.

TPM is charged at admission with an estimate (prompt plus output cap, as providers reserve)
and corrected once the real `usage` is known: when the answer completes, or when a stream
closes. Concurrency permits likewise live as long as the reply: a stream keeps its permit
until it closes. With adaptive concurrency the permit count follows AIMD: 429s, timeouts and
(optionally) slow answers cut it, successes grow it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Literal

from levergate.config import MaxWaitSettings, RateLimitsSettings, TrafficSettings
from levergate.core.call import Call
from levergate.core.clock import Clock
from levergate.core.controls import Priority
from levergate.core.reply import Completed, Ended, Reply, Watcher
from levergate.core.service import Layer, Service
from levergate.errors import UpstreamRejected, UpstreamTimeout
from levergate.layers.measure import hot
from levergate.layers.traffic.metrics import TrafficMetrics
from levergate.layers.traffic.waiting import WaitingRoom, deadline_for
from levergate.policies.aimd import Aimd
from levergate.policies.estimate import actual_tokens, reserved_tokens
from levergate.policies.gcra import Rate
from levergate.policies.tiers import Tier
from levergate.stores.limits import Charge, LimitStore

if TYPE_CHECKING:
    from levergate.layers.shared import Shared
    from levergate.layers.traffic.keys import EndpointKey


# Tiers whose traffic is background (it can wait), whatever its priority class.
_BACKGROUND_TIERS = frozenset({Tier.FLEX, Tier.BATCH})


@dataclass(frozen=True, slots=True)
class LimitScope:
    """The rate limits kept under one key prefix: an API key, an endpoint, a tenant. Background
    requests are charged against `background` limits too (the same rates at `1 - reserve`, kept
    under keys of their own), so they never take the reserved share (layers/traffic/waiting.py)."""

    key: str
    rpm: Rate | None
    tpm: Rate | None
    tpm_charge: Literal["reserved", "used"] = "reserved"
    background_rpm: Rate | None = None
    background_tpm: Rate | None = None

    @classmethod
    def of(cls, key: str, limits: RateLimitsSettings) -> LimitScope:
        def rate(limit: int | None, burst: float) -> Rate | None:
            if limit is None:
                return None
            return Rate.per_window(
                limit=limit, window=limits.window_seconds, burst_share=burst, margin=limits.margin
            )

        rpm, tpm = rate(limits.rpm, limits.burst), rate(limits.tpm, limits.token_burst)
        share = 1.0 - limits.interactive_reserve
        if share >= 1.0:
            return cls(key, rpm, tpm, limits.tpm_charge)
        return cls(key, rpm, tpm, limits.tpm_charge, rpm and rpm.scaled(share),
                   tpm and tpm.scaled(share))  # fmt: skip

    def charges(self, tokens: float, *, background: bool = False) -> list[Charge]:
        found = []
        if self.rpm is not None:
            found.append(Charge(f"{self.key}:rpm", 1.0, self.rpm))
        if self.tpm is not None:
            found.append(Charge(f"{self.key}:tpm", float(tokens), self.tpm))
        if background and self.background_rpm is not None:
            found.append(Charge(f"{self.key}:rpm:bg", 1.0, self.background_rpm))
        if background and self.background_tpm is not None:
            found.append(Charge(f"{self.key}:tpm:bg", float(tokens), self.background_tpm))
        return found

    def correction(
        self, call: Call, *, estimate: int, usage: dict[str, Any], background: bool = False
    ) -> list[Charge]:
        """The TPM charges that turn the admission estimate into the real cost."""
        if self.tpm is None:
            return []
        real = actual_tokens(
            usage, body=call.body, charge=self.tpm_charge, embedding=call.kind == "embedding"
        )
        if real is None or real == estimate:
            return []
        fixes = [Charge(f"{self.key}:tpm", float(real - estimate), self.tpm)]
        if background and self.background_tpm is not None:
            fixes.append(Charge(f"{self.key}:tpm:bg", float(real - estimate), self.background_tpm))
        return fixes


class Limits:
    @classmethod
    def layer(cls, settings: TrafficSettings, *, key: EndpointKey, shared: Shared) -> Layer | None:
        """None when the endpoint key has no limit at all: then the layer would only estimate
        tokens and count, on every request, for nothing."""
        if not key.scopes and key.aimd is None:
            return None
        t = shared.traffic
        return partial(
            cls, name=key.name, room=key.state.room, scopes=key.scopes, store=t.store,
            clock=shared.clock, max_wait=settings.max_wait, metrics=t.metrics, aimd=key.aimd,
            slow_seconds=settings.aimd.slow_seconds,
        )  # fmt: skip

    def __init__(
        self,
        inner: Service,
        *,
        name: str,
        room: WaitingRoom,
        scopes: Sequence[LimitScope],
        store: LimitStore,
        clock: Clock,
        max_wait: MaxWaitSettings,
        metrics: TrafficMetrics,
        aimd: Aimd | None = None,
        slow_seconds: float | None = None,
    ) -> None:
        self._inner = inner
        self._name = name
        self._room = room
        self._scopes = tuple(scopes)
        self._store = store
        self._clock = clock
        self._max_wait = max_wait
        self._metrics = metrics
        self._aimd = aimd
        self._slow = slow_seconds
        self.in_flight = 0
        # Labelled children resolved once: `labels()` on every request is measurable overhead.
        self._waited = {p: hot.histogram(metrics.wait.labels(name, p.name.lower()))
                        for p in Priority}  # fmt: skip

    async def __call__(self, call: Call) -> Reply:
        estimate = reserved_tokens(call.body, embedding=call.kind == "embedding")
        priority = call.ctx.controls.priority
        background = priority is Priority.BATCH or call.ctx.trace.tier in _BACKGROUND_TIERS
        charges = [c for scope in self._scopes
                   for c in scope.charges(estimate, background=background)]  # fmt: skip
        now = self._clock.now()
        wait = getattr(self._max_wait, priority.name.lower())
        deadline = deadline_for(
            ctx_deadline=call.ctx.controls.deadline, priority_wait=wait, now=now
        )
        await self._room.enter(charges=charges, priority=int(priority), deadline=deadline,
                               background=background)  # fmt: skip
        admitted = self._clock.now()
        self._waited[priority].observe(admitted - now)
        call.ctx.trace.queued_seconds += admitted - now  # every attempt's wait, summed
        self.in_flight += 1
        try:
            reply = await self._inner(call)
        except BaseException as exc:
            self.finish(dropped=_is_drop(exc), started=admitted)
            raise
        if isinstance(reply, Completed):
            await self.correct(call, estimate, reply.usage, background)
            self.finish(dropped=False, started=admitted)
            return reply
        return reply.watch(_Streaming(self, call, estimate, admitted, background))

    async def correct(
        self, call: Call, estimate: int, usage: dict[str, Any] | None, background: bool
    ) -> None:
        if not usage:
            return
        fixes = [
            fix
            for s in self._scopes
            for fix in s.correction(call, estimate=estimate, usage=usage, background=background)
        ]
        if fixes:
            await self._store.adjust(fixes)

    def finish(self, *, dropped: bool, started: float) -> None:
        self.in_flight -= 1
        self._room.release()
        if self._aimd is None:
            return
        slow = self._slow is not None and self._clock.now() - started > self._slow
        if dropped or slow:
            self._aimd.drop()
        else:
            self._aimd.success(in_flight=self.in_flight + 1)


def _is_drop(exc: BaseException) -> bool:
    """What AIMD reads as "too much": the provider's 429 or a timeout."""
    if isinstance(exc, UpstreamRejected):
        return exc.upstream_status == 429
    return isinstance(exc, UpstreamTimeout)


class _Streaming(Watcher):
    """A streamed answer holds its permit until it ends; its tokens are corrected then to the
    usage it reported, even when cut short (it used them up to where it was cut)."""

    __slots__ = ("_background", "_call", "_estimate", "_limits", "_started")

    def __init__(
        self, limits: Limits, call: Call, estimate: int, started: float, background: bool
    ) -> None:
        self._limits, self._call, self._estimate = limits, call, estimate
        self._started, self._background = started, background

    async def end(self, ended: Ended) -> None:
        error = ended.error
        self._limits.finish(dropped=error is not None and _is_drop(error), started=self._started)
        await self._limits.correct(self._call, self._estimate, ended.usage, self._background)
