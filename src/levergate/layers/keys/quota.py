"""`KeyQuota`: a gateway key's own rates and money budgets, applied to each of its requests.

Called by `Authenticate` (FRONT, right under Measure) once the key is known, so it sits above
the tenant's Admission and the caches: a key's RPM/TPM mean what the key may ask, cached or
not, and a key over its budget is refused before anything else spends work on it.

Rates reuse the traffic levers' machinery: one `WaitingRoom` per key over the gateway's limit
store (GCRA; in Redis and so shared by replicas with `traffic.store: redis`), under the key
`vkey:<id>`. Over a rate the request waits in priority order and is refused with 429
`key_rate_limited` only when the wait would pass its deadline. TPM is reserved at admission
(prompt plus output cap) and corrected to the tokens used when the answer or stream ends.

Budgets: before a request, the key's spend today and this month (UTC) is read from the spend
store, plus what this process owes it; at or over either budget the request gets 429
`budget_exceeded`. The cost comes from the cost ledger: `BudgetSink` is one of Measure's sinks,
so a key is charged exactly what its finished-request record says it cost (priced at the model
that answered, output tokens counted when the upstream reported none, a cached answer free).
`Budgets.owe` adds it in the process at once, and the `budgets` background job writes what is
owed to the spend store every `auth.spend.flush_seconds` (and once more at close), so other
replicas see it within that time. Concurrent requests all pass the check before any of them is
charged, so a budget can be overshot by the cost of the requests in flight when it runs out —
the price of not holding a lock across a model call. A spend store that fails is logged and
skipped for `_COOLDOWN` seconds: budgets go unchecked for that time rather than failing
requests, and charges stay owed in the process until it answers again.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from levergate.config import MaxWaitSettings, RateLimitsSettings
from levergate.core.call import Call
from levergate.core.clock import Clock
from levergate.core.controls import Priority
from levergate.core.reply import Completed, Ended, Reply, Watcher
from levergate.core.service import Service
from levergate.errors import BudgetExceeded, LevergateError, RateLimited
from levergate.layers.measure.record import RequestRecord
from levergate.layers.traffic.limits import LimitScope
from levergate.layers.traffic.metrics import TrafficMetrics
from levergate.layers.traffic.waiting import WaitingRoom, deadline_for
from levergate.policies.estimate import reserved_tokens
from levergate.stores.keys import KeyRecord
from levergate.stores.limits import LimitStore
from levergate.stores.spend import Periods, SpendStore, SpendUnavailable, Spent

T = TypeVar("T")

_log = logging.getLogger("levergate.keys")
_COOLDOWN = 1.0  # seconds a failed spend store is skipped before it is asked again
_MAX_ROOMS = 10_000  # idle key rooms are dropped beyond this
_MAX_OWED = 10_000  # (key, period) charges kept while the spend store is down


class Budgets:
    """Daily and monthly spend per key, checked before a request and charged after it."""

    def __init__(
        self,
        *,
        store: SpendStore,
        clock: Clock,
        wall: Callable[[], float],
        flush_seconds: float = 0.5,
    ) -> None:
        # No timeout here: a Redis store's client bounds every command with its socket timeouts
        # (auth.spend.timeout_seconds), and the memory store cannot hang.
        self._store = store
        self._clock = clock
        self._wall = wall
        self._flush_seconds = flush_seconds
        self._down_until = 0.0
        # Charges not yet written, by key and period: kept while the store is down.
        self._owed: dict[tuple[str, Periods], float] = {}
        self._periods = Periods.at(wall())

    def periods(self) -> Periods:
        """The current day and month, computed once per day (it is most of a check's cost)."""
        now = self._wall()
        if not self._periods.day_ends - 86_400 <= now < self._periods.day_ends:
            self._periods = Periods.at(now)
        return self._periods

    async def spent(self, key_id: str) -> Spent | None:
        """Today's and this month's spend, what is owed included; None while the store cannot
        say."""
        periods = self.periods()
        stored = await self._guarded(lambda: self._store.spent(key_id, periods))
        return None if stored is None else self._with_owed(key_id, stored, periods)

    def _with_owed(self, key_id: str, stored: Spent, periods: Periods) -> Spent:
        day = month = 0.0
        for (owner, owed_in), usd in self._owed.items():
            if owner == key_id and owed_in.month == periods.month:
                month += usd
                day += usd if owed_in.day == periods.day else 0.0
        return Spent(day=stored.day + day, month=stored.month + month)

    async def check(self, record: KeyRecord) -> float | None:
        """Refuse a key at or over a budget; else the dollars left of its tighter budget (None:
        it has none, or the spend store cannot say)."""
        if record.daily_budget_usd is None and record.monthly_budget_usd is None:
            return None
        periods = self.periods()
        spent = await self.spent(record.id)
        if spent is None:
            return None
        now = self._wall()
        left = math.inf
        for period, used, budget, ends in (
            ("daily", spent.day, record.daily_budget_usd, periods.day_ends),
            ("monthly", spent.month, record.monthly_budget_usd, periods.month_ends),
        ):
            if budget is not None and used >= budget:
                raise BudgetExceeded(
                    f"This API key has spent its {period} budget (${used:.4f} of ${budget:.2f});"
                    f" it resets at {_utc(ends)}.",
                    code="budget_exceeded",
                    retry_after=max(1.0, ends - now),
                )
            if budget is not None:
                left = min(left, budget - used)
        return left

    def owe(self, *, key_id: str, usd: float) -> None:
        """Add `usd` to the key's spend today and this month: at once in this process (the
        next check sees it), in the spend store at the next flush."""
        if usd <= 0:
            return
        owed = (key_id, self.periods())
        if owed in self._owed or len(self._owed) < _MAX_OWED:
            self._owed[owed] = self._owed.get(owed, 0.0) + usd
        else:
            _log.warning("spend of key %s lost: %d charges already owed", key_id, _MAX_OWED)

    async def flush(self) -> None:
        """Write what is owed to the spend store; what it cannot take stays owed."""
        if not self._owed or self._clock.now() < self._down_until:
            return
        owed, self._owed = self._owed, {}
        items = list(owed.items())
        for index, ((owner, periods), amount) in enumerate(items):
            if not await self._paid(owner, amount, periods):
                for unpaid, rest in items[index:]:
                    self._owed[unpaid] = self._owed.get(unpaid, 0.0) + rest
                return

    async def run(self) -> None:
        """The background job (`Pipeline.background`): flush every `flush_seconds`."""
        while True:
            await self._clock.sleep(self._flush_seconds)
            await self.flush()

    async def _paid(self, key_id: str, usd: float, periods: Periods) -> bool:
        try:
            await self._store.add(key_id, usd, periods)
        except (SpendUnavailable, TimeoutError) as exc:
            self._failed(exc)
            return False
        return True

    async def _guarded(self, work: Callable[[], Awaitable[T]]) -> T | None:
        if self._clock.now() < self._down_until:
            return None
        try:
            return await work()
        except (SpendUnavailable, TimeoutError) as exc:
            self._failed(exc)
            return None

    def _failed(self, exc: BaseException) -> None:
        self._down_until = self._clock.now() + _COOLDOWN
        _log.warning("budgets unchecked for %.0fs: %s", _COOLDOWN, exc)


@dataclass(frozen=True, slots=True)
class _Admitted:
    """A request let in by its key's rates: what to release and correct when it ends."""

    room: WaitingRoom
    scope: LimitScope
    tokens: int  # the TPM charged at admission (0 without a TPM limit)


class KeyQuota:
    def __init__(
        self,
        *,
        budgets: Budgets | None,
        store: LimitStore,
        clock: Clock,
        max_wait: MaxWaitSettings,
        max_queue: int,
        metrics: TrafficMetrics,
    ) -> None:
        self.budgets = budgets
        self._store = store
        self._clock = clock
        self._max_wait = max_wait
        self._max_queue = max_queue
        self._metrics = metrics
        self._rooms: dict[str, tuple[tuple[int | None, int | None], WaitingRoom, LimitScope]] = {}
        # Labelled children resolved once: `labels()` on every request is measurable overhead.
        self._waited = {p: metrics.wait.labels("key", p.name.lower()) for p in Priority}

    async def serve(self, record: KeyRecord, call: Call, inner: Service) -> Reply:
        """Run `call` for `record`'s key through `inner`, within its rates and budgets."""
        if self.budgets is not None:
            try:
                call.ctx.trace.budget_left = await self.budgets.check(record)
            except BudgetExceeded:
                self._metrics.shed.labels(
                    "key", call.ctx.controls.priority.name.lower(), "budget"
                ).inc()
                raise
        admitted = await self._enter(record, call)
        if admitted is None:  # no rates: nothing to release or correct afterwards
            return await inner(call)
        try:
            reply = await inner(call)
        except BaseException:
            admitted.room.release()
            raise
        if isinstance(reply, Completed):
            await self.settle(call, admitted, reply.usage)
            return reply
        return reply.watch(_Settling(self, call, admitted))

    async def settle(self, call: Call, admitted: _Admitted, usage: dict[str, Any] | None) -> None:
        """Release the key's permit and correct its TPM charge to the tokens used (its cost is
        charged from the finished-request record: `BudgetSink`)."""
        admitted.room.release()
        if usage:
            fixes = admitted.scope.correction(call, estimate=admitted.tokens, usage=usage)
            if fixes:
                await self._store.adjust(fixes)

    async def _enter(self, record: KeyRecord, call: Call) -> _Admitted | None:
        if record.rpm is None and record.tpm is None:
            return None
        room, scope = self._room(record)
        ctx = call.ctx
        priority = ctx.controls.priority.name.lower()
        now = self._clock.now()
        wait = getattr(self._max_wait, priority)
        deadline = deadline_for(ctx_deadline=ctx.controls.deadline, priority_wait=wait, now=now)
        tokens = (
            0
            if scope.tpm is None
            else reserved_tokens(call.body, embedding=call.kind == "embedding")
        )
        charges = scope.charges(tokens)
        await room.enter(charges=charges, priority=int(ctx.controls.priority), deadline=deadline)
        self._waited[ctx.controls.priority].observe(self._clock.now() - now)
        return _Admitted(room, scope, tokens)

    def _room(self, record: KeyRecord) -> tuple[WaitingRoom, LimitScope]:
        rates = (record.rpm, record.tpm)
        found = self._rooms.get(record.id)
        if found is not None and found[0] == rates:
            return found[1], found[2]
        if len(self._rooms) >= _MAX_ROOMS:
            for name in [n for n, (_, r, _) in self._rooms.items() if r.idle]:
                del self._rooms[name]
        room = WaitingRoom(
            store=self._store,
            clock=self._clock,
            max_queue=self._max_queue,
            shed_error=self._refuse,
        )
        # A key's TPM counts the tokens it used: the reservation is corrected after the call.
        limits = RateLimitsSettings(rpm=record.rpm, tpm=record.tpm, tpm_charge="used")
        scope = LimitScope.of(f"vkey:{record.id}", limits)
        self._rooms[record.id] = (rates, room, scope)
        return room, scope

    def _refuse(self, why: str, retry_after: float) -> LevergateError:
        self._metrics.shed.labels("key", "-", why).inc()
        return RateLimited(
            f"This API key is over its rate limit; retry after {retry_after:.1f}s.",
            code="key_rate_limited",
            retry_after=retry_after,
        )


def _utc(unix: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(unix))


class BudgetSink:
    """Measure's sink that charges each key what its request cost (the cost ledger's figure)."""

    def __init__(self, budgets: Budgets) -> None:
        self._budgets = budgets

    def emit(self, record: RequestRecord) -> None:
        if record.key_id is not None and record.cost_usd > 0:
            self._budgets.owe(key_id=record.key_id, usd=record.cost_usd)


class _Settling(Watcher):
    """A stream cut short still used its tokens up to where it was cut: settled when it ends."""

    __slots__ = ("_admitted", "_call", "_quota")

    def __init__(self, quota: KeyQuota, call: Call, admitted: _Admitted) -> None:
        self._quota, self._call, self._admitted = quota, call, admitted

    async def end(self, ended: Ended) -> None:
        await self._quota.settle(self._call, self._admitted, ended.usage)
