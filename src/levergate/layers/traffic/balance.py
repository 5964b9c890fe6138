"""Balance: which endpoint key serves this attempt. The bottom of a model alias's stack.

PER MODEL, under Retry and Deadline, so every attempt chooses afresh and a retry avoids the
endpoint that just failed it. Strategies (traffic.balance.strategy): `weighted` random,
`least_outstanding`, and `p2c` — two candidates sampled by weight, the one with the lower
predicted completion time kept (see `policies.balancing`). The prediction is fed by what this
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
from typing import Any, Literal

from levergate.core.call import Call, Trace
from levergate.core.clock import Clock
from levergate.core.quota import Quota
from levergate.core.reply import Completed, EventSource, Reply
from levergate.errors import UpstreamError, UpstreamRejected
from levergate.layers.traffic.endpoints import EjectionGroup, EndpointState, Node
from levergate.policies import balancing
from levergate.policies.backoff import retry_floor
from levergate.policies.ejection import State
from levergate.policies.estimate import output_cap
from levergate.policies.ewma import Ewma

Strategy = Literal["p2c", "least_outstanding", "weighted"]
TRUSTED_SAMPLES = 2.0  # recent samples an average needs before the balancer believes it
_DEFAULT_COOLDOWN = 1.0  # seconds, after a 429 that gave no hint


@dataclass(frozen=True, slots=True)
class Member:
    """A node in one alias's pool, with the alias's weight and model name for it."""

    node: Node
    weight: float = 1.0
    upstream_model: str | None = None


class Balance:
    def __init__(
        self,
        *,
        members: Sequence[Member],
        strategy: Strategy,
        group: EjectionGroup,
        clock: Clock,
        rng: random.Random,
        latency_factor: float | None = None,
        latency_min_requests: float = 5.0,
    ) -> None:
        if not members:
            raise ValueError("a balancer needs at least one endpoint")
        self._members = tuple(members)
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
        state.queued_tokens += tokens
        try:
            reply = await member.node.service(call)
        except BaseException as exc:
            self._release(state, tokens)
            if isinstance(exc, UpstreamError):
                self._after_failure(member, exc, trace)
            raise
        now = self._clock.now()
        self._read_quota(state, trace.quota, now)
        head = trace.upstream_seconds - before
        state.latency.observe(head, now=now)
        self._check_latency(state, now)
        if isinstance(reply, Completed):
            self._release(state, tokens)
            self._observe_speed(state, reply.usage, head)
            return reply
        return reply.through(lambda events: self._watch(state, tokens, trace, before, events))

    def choose(self, call: Call, now: float) -> Member:
        """The member for this attempt (public for tests and the benchmark's reports)."""
        failed = call.ctx.trace.failed_endpoints
        pool = [m for m in self._members if m.node.state.health.available(now)]
        if not pool:
            return min(self._members, key=lambda m: m.node.state.health.ejected_until)
        fresh = [m for m in pool if m.node.state.name not in failed]
        pool = fresh or pool
        if self._strategy != "p2c":
            ready = [m for m in pool if m.node.state.cooldown_until <= now]
            pool = ready or pool
        weights = [m.weight for m in pool]
        if self._strategy == "weighted":
            index = balancing.pick_weighted(weights, rng=self._rng)
        elif self._strategy == "least_outstanding":
            loads = [self._load(m, now) for m in pool]
            index = balancing.pick_least_outstanding(loads, rng=self._rng)
        else:
            own = float(output_cap(call.body))
            index = balancing.pick_p2c(
                weights, lambda i: self._load(pool[i], now), own_tokens=own, rng=self._rng
            )
        return pool[index]

    def _load(self, member: Member, now: float) -> balancing.Load:
        state = member.node.state
        wait = max(state.cooldown_until - now, state.room.backlog_seconds(now))
        return balancing.Load(
            weight=member.weight,
            outstanding=state.outstanding,
            queued_tokens=state.queued_tokens,
            ttft=_trusted(state.ttft, now),
            tokens_per_second=_trusted(state.speed, now),
            wait=max(0.0, wait),
            headroom=state.headroom,
        )

    async def _watch(
        self, state: EndpointState, tokens: float, trace: Trace, before: float, events: EventSource
    ) -> EventSource:
        first: float | None = None
        usage: dict[str, Any] | None = None
        clean = False
        try:
            async for event in events:
                if first is None:
                    first = trace.upstream_seconds - before
                    state.ttft.observe(first, now=self._clock.now())
                if (found := event.usage()) is not None:
                    usage = found
                yield event
            clean = True
        finally:
            self._release(state, tokens)
            if clean:
                total = trace.upstream_seconds - before
                self._observe_speed(state, usage, total - (first or 0.0))

    def _release(self, state: EndpointState, tokens: float) -> None:
        state.outstanding -= 1
        state.queued_tokens = max(0.0, state.queued_tokens - tokens)

    def _observe_speed(
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
            and s.health.state(now) is not State.EJECTED
        }
        if len(peers) < 2:
            return
        median = statistics.median(peers.values())
        if median > 0 and state.latency.value() > self._latency_factor * median:
            self._group.eject(state, now)


def _trusted(average: Ewma, now: float) -> float:
    """The average, or 0 (unknown) while it rests on too little recent evidence."""
    return average.value() if average.weight(now) >= TRUSTED_SAMPLES else 0.0
