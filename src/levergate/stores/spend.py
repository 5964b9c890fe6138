"""The spend-store seam: US dollars each gateway key spent in the current UTC day and month.

Two methods. `spent(key_id, periods)` reads both counters (what a request checks its budgets
against), `add(key_id, usd, periods)` adds a finished request's cost to both. A period is
named by its calendar date (`2026-12-01`, `2026-12`): a new day starts a new counter, so
nothing ever needs resetting, and a counter expires a day after its period ends.

`MemorySpendStore` is one process's (tests; forgotten at restart); `SqliteSpendStore`
(stores/spend_sqlite.py) one machine's, surviving restarts; `RedisSpendStore` is shared by every
replica: `INCRBYFLOAT` is atomic, so concurrent charges from many replicas add up exactly.
"""

from __future__ import annotations

import asyncio
import calendar
import datetime as dt
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from levergate.stores.redis_calls import cancellation_kept

if TYPE_CHECKING:
    from redis.asyncio import Redis

_DAY = 86_400.0
_MAX_MEMORY_COUNTERS = 100_000  # expired ones are dropped beyond this


class SpendUnavailable(Exception):
    """The shared spend store could not answer; budgets then go unchecked, never fail a call."""


@dataclass(frozen=True, slots=True)
class Periods:
    """The day and month a moment falls in, and the Unix second each ends at."""

    day: str
    month: str
    day_ends: float
    month_ends: float

    @classmethod
    def at(cls, unix: float) -> Periods:
        # Unix days are exactly 86,400 s (no leap seconds), so whole-second arithmetic names the
        # day; `fromtimestamp` of the raw float could round 23:59:59.9999997 into the next day.
        day_start = math.floor(unix) - math.floor(unix) % 86_400
        day = dt.datetime.fromtimestamp(day_start, tz=dt.UTC)
        days = calendar.monthrange(day.year, day.month)[1]
        month_start = day_start - (day.day - 1) * _DAY
        return cls(
            day=day.strftime("%Y-%m-%d"),
            month=day.strftime("%Y-%m"),
            day_ends=day_start + _DAY,
            month_ends=month_start + days * _DAY,
        )


@dataclass(frozen=True, slots=True)
class Spent:
    day: float
    month: float


class SpendStore(Protocol):
    async def spent(self, key_id: str, periods: Periods) -> Spent: ...

    async def add(self, key_id: str, usd: float, periods: Periods) -> None: ...


class MemorySpendStore:
    def __init__(self) -> None:
        self._counters: dict[str, tuple[float, float]] = {}  # name -> (usd, expires)

    async def spent(self, key_id: str, periods: Periods) -> Spent:
        day = self._counters.get(f"{key_id}:d:{periods.day}", (0.0, 0.0))[0]
        month = self._counters.get(f"{key_id}:m:{periods.month}", (0.0, 0.0))[0]
        return Spent(day=day, month=month)

    async def add(self, key_id: str, usd: float, periods: Periods) -> None:
        if len(self._counters) > _MAX_MEMORY_COUNTERS:
            # Anything that expired before the current day began is of a finished period.
            cutoff = periods.day_ends - _DAY
            for name in [n for n, (_, ends) in self._counters.items() if ends <= cutoff]:
                del self._counters[name]
        for name, ends in (
            (f"{key_id}:d:{periods.day}", periods.day_ends),
            (f"{key_id}:m:{periods.month}", periods.month_ends),
        ):
            usd_before = self._counters.get(name, (0.0, 0.0))[0]
            self._counters[name] = (usd_before + usd, ends + _DAY)

    async def aclose(self) -> None:
        return None


class RedisSpendStore:
    def __init__(self, client: Redis, *, prefix: str, timeout: float) -> None:
        from redis.exceptions import RedisError

        self._client = client
        self._prefix = prefix
        # The client's pool is shared and its socket timeout a backstop: every call is
        # bounded by the section's own timeout.
        self._timeout = timeout
        self._errors: tuple[type[BaseException], ...] = (RedisError, OSError, TimeoutError)
        # ValueError: a counter that is not a number (written by something else).
        self._read_errors = (*self._errors, ValueError)

    def _names(self, key_id: str, periods: Periods) -> tuple[str, str]:
        # The hash tag keeps a key's two counters in one Redis Cluster slot (one MULTI, one MGET).
        p = f"{self._prefix}{{{key_id}}}"
        return f"{p}:d:{periods.day}", f"{p}:m:{periods.month}"

    async def spent(self, key_id: str, periods: Periods) -> Spent:
        try:
            with cancellation_kept():
                async with asyncio.timeout(self._timeout):
                    day, month = await self._client.mget(self._names(key_id, periods))
            return Spent(day=float(day or 0.0), month=float(month or 0.0))
        except self._read_errors as exc:
            raise SpendUnavailable(f"redis spend store: {type(exc).__name__}: {exc}") from exc

    async def add(self, key_id: str, usd: float, periods: Periods) -> None:
        day, month = self._names(key_id, periods)
        try:
            with cancellation_kept():
                async with (
                    asyncio.timeout(self._timeout),
                    self._client.pipeline(transaction=True) as pipe,
                ):
                    pipe.incrbyfloat(day, usd)
                    pipe.expireat(day, int(periods.day_ends + _DAY))
                    pipe.incrbyfloat(month, usd)
                    pipe.expireat(month, int(periods.month_ends + _DAY))
                    await pipe.execute()
        except self._errors as exc:
            raise SpendUnavailable(f"redis spend store: {type(exc).__name__}: {exc}") from exc

    async def aclose(self) -> None:
        await self._client.aclose()
