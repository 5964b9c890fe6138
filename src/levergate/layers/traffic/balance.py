"""Balance: which endpoint key serves this attempt. The bottom of a model alias's stack.

PER MODEL, under Retry and Deadline, so every attempt chooses afresh and a retry avoids the
endpoint that just failed it. The choice among the endpoints left is a pluggable
`policies.balancing.Strategy`, by name (traffic.balance.strategy): `weighted` random,
`least_outstanding`, and `p2c` — two candidates sampled by weight, the one with the lower
predicted completion time kept. The prediction is fed by what this
layer observes of each endpoint: requests and tokens in flight, TTFT, tokens per second, the
provider's quota headroom (the `Quota` the transport parsed from `x-ratelimit-*` onto the
call's record), and cooldowns after a 429 or an exhausted quota (until `Retry-After` /
`x-ratelimit-reset-*`).

Ejected endpoints are skipped; when none is left the one whose ejection ends first is used
(fail open: a lone endpoint is never made unreachable by its own health). A stream stays on
the endpoint it started on, and the endpoint's books (outstanding, speed) close with it.

An average resting on fewer than `TRUSTED_SAMPLES` recent samples counts as unknown, which
predicts optimistically: a new endpoint, one readmitted after an ejection and one nobody has
tried for a while are all tried again, so one slow sample (a cold connection, a probe) never
starves an endpoint while its peers keep winning every comparison.

With `ejection.latency_factor` set, an endpoint whose latency average stands out from its
peers' in the alias is ejected too (through the same `EjectionGroup`, so the cap and the
growing ejection time apply); see `_check_latency` for the evidence it needs first.

When an endpoint answers 429, the error's `retry_after` is rewritten to the soonest any
candidate frees up — zero when another key is free — so Retry waits only when it must.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from levergate.config import TrafficSettings
from levergate.core.call import Call, Trace
from levergate.core.clock import Clock
from levergate.core.quota import Quota
from levergate.core.reply import Completed, Ended, Event, Reply, Watcher
from levergate.errors import UpstreamError, UpstreamRejected
from levergate.layers.traffic.endpoints import EjectionGroup, EndpointState, Node
from levergate.policies import balancing
from levergate.policies.backoff import retry_floor
from levergate.policies.ejection import EJECTED
from levergate.policies.estimate import output_cap
from levergate.policies.ewma import Ewma

if TYPE_CHECKING:
    from levergate.layers.shared import Shared

TRUSTED_SAMPLES = 2.0  # recent samples an average needs before the balancer believes it
_DEFAULT_COOLDOWN = 1.0  # seconds, after a 429 that gave no hint


@dataclass(frozen=True, slots=True)
class Member:
    """A node in one alias's pool, with the alias's weight and model name for it."""

    node: Node
    weight: float = 1.0
    upstream_model: str | None = None


class Balance:
    @classmethod
    def of(
        cls,
        members: Sequence[Member],
        *,
        settings: TrafficSettings,
        shared: Shared,
        strategy: str | None = None,
    ) -> Balance:
        """The balancer over one alias's pool, as `traffic.balance` and `traffic.ejection` say
        (`strategy`: the alias's own, instead of `traffic.balance.strategy`)."""
        e, b = settings.ejection, settings.balance
        return cls(
            members=members,
            strategy=balancing.strategy_named(
                strategy or b.strategy, settings=b, clock=shared.clock
            ),
            group=shared.traffic.group,
            clock=shared.clock,
            rng=shared.rng(),
            latency_factor=e.latency_factor if e.enabled else None,
            latency_min_requests=e.latency_min_requests,
        )

    def __init__(
        self,
        *,
        members: Sequence[Member],
        strategy: balancing.Strategy,
        group: EjectionGroup,
        clock: Clock,
        rng: random.Random,
        latency_factor: float | None = None,
        latency_min_requests: float = 5.0,
    ) -> None:
        if not members:
            raise ValueError("a balancer needs at least one endpoint")
        self._members = tuple(members)
        # What the strategy sees of each member, made once; `_moment` is the time of the
        # choice being made (choosing is synchronous, so one moment serves every view).
        self._moment = _Moment()
        self._views = tuple(_Candidate(m, self._moment) for m in self._members)
        self._strategy = strategy
        self._group = group
        self._clock = clock
        self._rng = rng
        self._latency_factor = latency_factor
        self._latency_min = latency_min_requests

    async def __call__(self, call: Call) -> Reply:
        now = self._clock.now()
        member = self.choose(call, now)
        state = member.node.state
        if member.upstream_model:
            call = call.with_body(model=member.upstream_model)
        tokens = float(output_cap(call.body))
        trace = call.ctx.trace
        trace.quota = None  # what this attempt's answer says, not an earlier attempt's
        before = trace.upstream_seconds
        state.outstanding += 1
        state.prefilling += 1
        state.queued_tokens += tokens
        try:
            reply = await member.node.service(call)
        except BaseException as exc:
            state.prefilling -= 1
            self.release(state, tokens)
            if isinstance(exc, UpstreamError):
                self._after_failure(member, exc, trace)
            raise
        now = self._clock.now()
        self._read_quota(state, trace.quota, now)
        head = trace.upstream_seconds - before
        state.latency.observe(head, now=now)
        self._check_latency(state, now)
        if isinstance(reply, Completed):
            state.prefilling -= 1
            self.release(state, tokens)
            self.observe_speed(state, reply.usage, head)
            return reply
        return reply.watch(_Streaming(self, state, tokens, trace, before))

    def choose(self, call: Call, now: float) -> Member:
        """The member for this attempt (public for tests and the benchmark's reports)."""
        failed = call.ctx.trace.failed_endpoints
        pool = [v for v in self._views if v.state.health.available(now)]
        if not pool:
            return min(self._members, key=lambda m: m.node.state.health.ejected_until)
        if failed:  # a retry: the endpoints that failed this call are the last resort
            pool = [v for v in pool if v.name not in failed] or pool
        self._moment.now = now
        return self._strategy.choose(pool, call=call, rng=self._rng).member

    def prefilled(self, state: EndpointState, seconds: float) -> None:
        """A stream's first event came `seconds` after its request was sent."""
        state.prefilling -= 1
        state.ttft.observe(seconds, now=self._clock.now())

    def release(self, state: EndpointState, tokens: float) -> None:
        state.outstanding -= 1
        state.queued_tokens = max(0.0, state.queued_tokens - tokens)

    def observe_speed(
        self, state: EndpointState, usage: dict[str, Any] | None, seconds: float
    ) -> None:
        generated = (usage or {}).get("completion_tokens")
        if isinstance(generated, int) and generated > 0 and seconds > 0:
            state.speed.observe(generated / seconds, now=self._clock.now())

    def _after_failure(self, member: Member, exc: UpstreamError, trace: Trace) -> None:
        now = self._clock.now()
        state = member.node.state
        trace.failed_endpoints.add(state.name)
        throttled = isinstance(exc, UpstreamRejected) and exc.upstream_status == 429
        if not throttled and exc.retry_after is None:
            return
        reset = trace.quota.reset_floor() if trace.quota is not None else None
        floor = retry_floor(retry_after=exc.retry_after, reset=reset)
        if throttled and floor <= 0:
            floor = _DEFAULT_COOLDOWN
        state.cooldown_until = max(state.cooldown_until, now + floor)
        # The soonest any usable endpoint frees up: zero when another one is free right now.
        usable = [m for m in self._members if m.node.state.health.available(now)] or [member]
        exc.retry_after = min(max(0.0, m.node.state.cooldown_until - now) for m in usable)

    def _read_quota(self, state: EndpointState, quota: Quota | None, now: float) -> None:
        if quota is None:
            return
        for window in (quota.requests, quota.tokens):
            if window.exhausted and window.reset_seconds:
                state.cooldown_until = max(state.cooldown_until, now + window.reset_seconds)
        headroom = quota.headroom
        if headroom is not None:
            state.headroom = headroom

    def _check_latency(self, state: EndpointState, now: float) -> None:
        """Eject a latency outlier: its average above `latency_factor` times the median of its
        peers' in this alias. Only recent evidence counts — the endpoint and each peer counted
        need `latency_min_requests` requests within about the averages' memory, and ejected
        peers are left out — because a time-decayed average after a quiet spell is just the
        latest sample: without the floor one long generation, or a slowdown of every endpoint
        that happens to reach one of them first, would eject it."""
        if self._latency_factor is None or state.latency.weight(now) < self._latency_min:
            return
        peers = {
            id(s): s.latency.value()
            for m in self._members
            if (s := m.node.state) is not state
            and s.latency.weight(now) >= self._latency_min
            and s.health.state(now) is not EJECTED
        }
        if len(peers) < 2:
            return
        median = statistics.median(peers.values())
        if median > 0 and state.latency.value() > self._latency_factor * median:
            self._group.eject(state, now)


class _Moment:
    __slots__ = ("now",)

    def __init__(self) -> None:
        self.now = 0.0


class _Candidate:
    """A member as the strategy sees it at the moment of choosing (`balancing.Candidate`)."""

    __slots__ = ("_moment", "member", "name", "state", "weight")

    def __init__(self, member: Member, moment: _Moment) -> None:
        self.member = member
        self.state = member.node.state
        self.name = self.state.name
        self.weight = member.weight
        self._moment = moment

    @property
    def cooling(self) -> bool:
        return self.state.cooldown_until > self._moment.now

    def load(self) -> balancing.Load:
        state, now = self.state, self._moment.now
        wait = max(state.cooldown_until - now, state.room.backlog_seconds(now))
        return balancing.Load(
            weight=self.member.weight,
            outstanding=state.outstanding,
            queued_tokens=state.queued_tokens,
            ttft=_trusted(state.ttft, now),
            tokens_per_second=_trusted(state.speed, now),
            wait=max(0.0, wait),
            headroom=state.headroom,
            prefilling=state.prefilling,
        )


def _trusted(average: Ewma, now: float) -> float:
    """The average, or 0 (unknown) while it rests on too little recent evidence."""
    return average.value() if average.weight(now) >= TRUSTED_SAMPLES else 0.0


class _Streaming(Watcher):
    """A streamed attempt's endpoint: prefilling until its first event (its time to first event
    observed then), outstanding until it ends, its decode speed observed when it ends whole."""

    __slots__ = ("_balance", "_before", "_first", "_state", "_tokens", "_trace")

    def __init__(
        self, balance: Balance, state: EndpointState, tokens: float, trace: Trace, before: float
    ) -> None:
        self._balance, self._state, self._tokens = balance, state, tokens
        self._trace, self._before = trace, before
        self._first: float | None = None

    def first(self, event: Event) -> None:
        del event
        self._first = first = self._trace.upstream_seconds - self._before
        self._balance.prefilled(self._state, first)

    async def end(self, ended: Ended) -> None:
        state, first = self._state, self._first
        if first is None:
            state.prefilling -= 1
        self._balance.release(state, self._tokens)
        if ended.error is None:
            total = self._trace.upstream_seconds - self._before
            self._balance.observe_speed(state, ended.usage, total - (first or 0.0))
