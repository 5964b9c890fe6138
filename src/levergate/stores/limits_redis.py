"""Rate limits shared by every gateway replica: GCRA in Redis, one atomic Lua script per check.

Each limit key holds one value, its theoretical arrival time (see `policies.gcra`). The script
reads every key of a request's charges, decides, and writes all of them or none, in one round
trip and atomically — no replica can slip in between a read and a write, so N replicas admit
what one would. Time is Redis's own `TIME`, so replicas with drifting clocks still agree.
Keys expire once their TAT is in the past (an idle key and a missing key mean the same).

Keys carry a `{...}` hash tag in the default prefix so that, on Redis Cluster, every limit
lives in one slot and a multi-key script stays legal.

`FailoverLimitStore` wraps this store: while Redis is unreachable it logs once, counts, and
answers from a per-process `MemoryLimitStore` with `local_share` of each limit, letting one
check try Redis after `retry_seconds` (`stores.circuit`). A limiter outage never fails a
request, and a hung Redis costs at most one request its timeout per retry period.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from levergate.core.clock import Clock
from levergate.stores.circuit import Circuit
from levergate.stores.limits import Charge, LimitStore, MemoryLimitStore, StoreUnavailable
from levergate.stores.redis_calls import cancellation_kept, redis_client

if TYPE_CHECKING:
    from redis.asyncio import Redis

_log = logging.getLogger(__name__)

# KEYS: one per charge. ARGV[1]: "1" to spend when everything fits, "0" to only look.
# ARGV[2..]: cost, interval, burst, slack for each key in order (the math of gcra.check).
# Returns the wait in seconds, as a string because Lua numbers are truncated to integers on
# the way back to the client.
ACQUIRE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local wait = 0
local pushed = {}
local slacks = {}
for i, key in ipairs(KEYS) do
  local cost = tonumber(ARGV[4 * i - 2])
  local interval = tonumber(ARGV[4 * i - 1])
  local burst = tonumber(ARGV[4 * i])
  local slack = tonumber(ARGV[4 * i + 1])
  local start = now
  local tat = tonumber(redis.call('GET', key))
  if tat then start = math.max(tat, now - slack) end
  slacks[i] = slack
  pushed[i] = start + cost * interval
  local w = pushed[i] - math.max(burst, cost) * interval - now
  if w > wait then wait = w end
end
if wait <= 1e-9 then
  wait = 0
  if ARGV[1] == '1' then
    for i, key in ipairs(KEYS) do
      -- Kept while a late arrival could still use it (an expired key starts from now).
      local ttl = math.ceil((pushed[i] - now + slacks[i]) * 1000) + 1000
      redis.call('SET', key, string.format('%.6f', pushed[i]), 'PX', ttl)
    end
  end
end
return string.format('%.6f', wait)
"""

# ARGV: delta, interval for each key. A refund never leaves credit: below now means idle.
ADJUST = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
for i, key in ipairs(KEYS) do
  local delta = tonumber(ARGV[2 * i - 1])
  local interval = tonumber(ARGV[2 * i])
  local tat = tonumber(redis.call('GET', key))
  local new
  if delta >= 0 then
    new = math.max(tat or now, now) + delta * interval
  elseif tat then
    new = tat + delta * interval
  end
  if new and new > now then
    local ttl = math.ceil((new - now) * 1000) + 1000
    redis.call('SET', key, string.format('%.6f', new), 'PX', ttl)
  elseif tat then
    redis.call('DEL', key)
  end
end
return 1
"""


class RedisLimitStore:
    """`timeout` bounds each whole check: the socket timeout bounds only each read, which a
    server dribbling bytes would keep resetting."""

    def __init__(self, client: Redis, *, prefix: str, timeout: float | None = None) -> None:
        self._client = client
        self._prefix = prefix
        self._timeout = timeout
        self._acquire = client.register_script(ACQUIRE)
        self._adjust = client.register_script(ADJUST)

    async def acquire(self, charges: Sequence[Charge], *, commit: bool = True) -> float:
        if not charges:
            return 0.0
        args: list[str] = ["1" if commit else "0"]
        for c in charges:
            rate = c.rate
            args += [repr(float(c.cost)), repr(rate.interval), repr(float(rate.burst)),
                     repr(rate.slack)]  # fmt: skip
        result = await self._run(self._acquire, charges, args)
        return max(0.0, float(result))

    async def adjust(self, charges: Sequence[Charge]) -> None:
        if not charges:
            return
        args: list[str] = []
        for c in charges:
            args += [repr(float(c.cost)), repr(c.rate.interval)]
        await self._run(self._adjust, charges, args)

    async def aclose(self) -> None:
        await self._client.aclose()

    async def _run(self, script: Any, charges: Sequence[Charge], args: list[str]) -> Any:
        from redis.exceptions import RedisError

        keys = [self._prefix + c.key for c in charges]
        try:
            async with asyncio.timeout(self._timeout):
                with cancellation_kept():
                    return await script(keys=keys, args=args)
        except (RedisError, OSError, TimeoutError) as exc:
            raise StoreUnavailable(f"redis limit store: {type(exc).__name__}: {exc}") from exc


class FailoverLimitStore:
    """The shared store while it answers; per-process limits (logged, counted) while it does not.
    Whether to ask it is a `Circuit`: after a failure no check waits on it for `retry_seconds`,
    then one check tries it while the others are still answered locally, so a hung Redis costs
    one request its timeout per retry period instead of stalling every request meanwhile."""

    def __init__(
        self,
        primary: LimitStore,
        *,
        clock: Clock,
        local_share: float = 1.0,
        retry_seconds: float = 5.0,
        on_failover: Callable[[], None] | None = None,
    ) -> None:
        self._primary = primary
        self._local = MemoryLimitStore(clock=clock)
        self._circuit = Circuit(cooldown=retry_seconds, clock=clock)
        self._share = local_share
        self._on_failover = on_failover
        self.failovers = 0  # outages seen
        self.local_decisions = 0  # checks answered per process

    @property
    def degraded(self) -> bool:
        return not self._circuit.closed

    async def acquire(self, charges: Sequence[Charge], *, commit: bool = True) -> float:
        if self._circuit.admits():
            try:
                wait = await self._primary.acquire(charges, commit=commit)
            except StoreUnavailable as exc:
                self._fail(exc)
            except BaseException:
                self._circuit.abandoned()
                raise
            else:
                self._recovered()
                return wait
        self.local_decisions += 1
        return self._local.acquire_now(self._scaled(charges), commit=commit)

    async def adjust(self, charges: Sequence[Charge]) -> None:
        if self._circuit.admits():
            try:
                await self._primary.adjust(charges)
            except StoreUnavailable as exc:
                self._fail(exc)
            except BaseException:
                self._circuit.abandoned()
                raise
            else:
                self._recovered()
                return
        await self._local.adjust(self._scaled(charges))

    async def aclose(self) -> None:
        closer = getattr(self._primary, "aclose", None)
        if closer is not None:
            await closer()

    def _fail(self, exc: StoreUnavailable) -> None:
        if self._circuit.failed():
            self.failovers += 1
            if self._on_failover is not None:
                self._on_failover()
            _log.warning("rate limits fall back to per-process limits: %s", exc)

    def _recovered(self) -> None:
        if self._circuit.succeeded():
            _log.warning("rate limits are shared again (the shared store answers)")

    def _scaled(self, charges: Sequence[Charge]) -> list[Charge]:
        if self._share >= 1.0:
            return list(charges)
        return [Charge(c.key, c.cost, c.rate.scaled(self._share)) for c in charges]


def connect(*, url: str, prefix: str, timeout: float) -> RedisLimitStore:
    """A store on a Redis URL; the connection opens lazily on first use."""
    client = redis_client(url=url, timeout=timeout, what="traffic.store")
    return RedisLimitStore(client, prefix=prefix, timeout=timeout)
