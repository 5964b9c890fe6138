"""Authenticate through the keyring: 401 for unknown and revoked keys, 403 outside a key's
models, a key's own rates through the traffic limit store, and 429 budget_exceeded once a
key's daily or monthly spend reaches its budget. In-memory stores and a manual clock."""

from __future__ import annotations

import asyncio
import datetime as dt
from pathlib import Path

import pytest
from pydantic import SecretStr

from levergate.catalog import Catalog
from levergate.config import (
    ApiKeySettings,
    AuthSettings,
    KeyPolicySettings,
    MaxWaitSettings,
    MetricsSettings,
    PriceSettings,
)
from levergate.core.call import CacheOutcome, CacheResult, Call, Context
from levergate.core.controls import Controls
from levergate.core.reply import Completed, Event, EventSource, Reply, Stream
from levergate.errors import (
    AuthenticationFailed,
    BadRequest,
    BudgetExceeded,
    Overloaded,
    PermissionDenied,
    RateLimited,
)
from levergate.layers.auth import Authenticate
from levergate.layers.keys.keyring import Keyring
from levergate.layers.keys.quota import Budgets, BudgetSink, KeyQuota
from levergate.layers.measure.measure import Measure, Telemetry
from levergate.layers.measure.recorder import Recorder
from levergate.layers.traffic.metrics import TrafficMetrics
from levergate.stores.keys import MemoryKeyStore
from levergate.stores.keys_redis import RedisKeyStore
from levergate.stores.keys_sqlite import SqliteKeyStore
from levergate.stores.limits import MemoryLimitStore
from levergate.stores.redis_calls import redis_client
from levergate.stores.spend import (
    MemorySpendStore,
    Periods,
    RedisSpendStore,
    SpendStore,
    SpendUnavailable,
    Spent,
)
from levergate.testing import ManualClock

NOON = dt.datetime(2026, 3, 31, 12, 0, tzinfo=dt.UTC).timestamp()
USAGE = {"prompt_tokens": 100, "completion_tokens": 50}  # $0.01 at the prices below
PRICES = {"m": PriceSettings(input=50.0, output=100.0), "*": PriceSettings(input=1.0, output=0.0)}


class Upstream:
    """The inner service: answers with `usage`, as a whole answer or a stream."""

    def __init__(self) -> None:
        self.calls: list[Call] = []

    async def __call__(self, call: Call) -> Reply:
        self.calls.append(call)
        if not call.stream:
            return Completed(data={"model": call.model, "usage": USAGE})

        async def events() -> EventSource:
            yield Event.of({"choices": [{"delta": {"content": "hi"}}]})
            yield Event.of({"choices": [], "usage": USAGE})

        return Stream(events())


class Rig:
    def __init__(
        self, *, spend: SpendStore | None = None, config: list[ApiKeySettings] | None = None
    ):
        self.clock = ManualClock()
        self.wall = NOON
        self.store = MemoryKeyStore()
        self.keyring = Keyring(
            config_keys=config or [], store=self.store, clock=self.clock, cache_seconds=5.0,
            timeout=1.0, wall=lambda: self.wall,
        )  # fmt: skip
        self.budgets = Budgets(
            store=spend or MemorySpendStore(), clock=self.clock, wall=lambda: self.wall
        )
        self.metrics = TrafficMetrics()
        quota = KeyQuota(
            budgets=self.budgets, store=MemoryLimitStore(clock=self.clock),
            clock=self.clock, max_wait=MaxWaitSettings(), max_queue=100, metrics=self.metrics,
        )  # fmt: skip
        self.upstream = Upstream()
        self.auth = Authenticate(
            self.upstream, settings=AuthSettings(enabled=True), keyring=self.keyring, quota=quota
        )
        # Keys are charged from the finished-request record, as in the pipeline.
        recorder = Recorder(Telemetry(MetricsSettings()), catalog=Catalog.of_prices(PRICES),
                            sinks=[BudgetSink(self.budgets)])  # fmt: skip
        self.measured = Measure(self.auth, recorder=recorder)

    async def call(
        self,
        key: str,
        *,
        model: str = "m",
        stream: bool = False,
        max_tokens: int | None = None,
        deadline: float | None = None,
    ) -> Reply:
        body = {"model": model, "messages": [{"role": "user", "content": "x"}], "stream": stream}
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        headers = {"authorization": f"Bearer {key}"}
        context = Context("r", headers=headers, controls=Controls(deadline=deadline))
        return await self.send(Call(kind="chat", body=body, ctx=context))

    async def send(self, call: Call) -> Reply:
        """Through Measure, to the end of the answer and until its record has been emitted."""
        reply = await self.measured(call)
        if isinstance(reply, Stream):
            async for _ in reply:
                pass
            await reply.aclose()
        for _ in range(3):  # the record leaves on a later loop turn
            await asyncio.sleep(0)
        return reply


async def test_store_keys_name_their_tenant_and_revoked_or_unknown_keys_get_401() -> None:
    rig = Rig()
    record, key = await rig.keyring.create(tenant="acme", name="ci", policy=KeyPolicySettings())
    await rig.call(key)
    assert rig.upstream.calls[-1].ctx.principal.tenant == "acme"
    assert rig.upstream.calls[-1].ctx.trace.key_id == record.id
    await rig.keyring.revoke(record.id)
    for presented in (key, "lg-made-up", key + "x"):
        with pytest.raises(AuthenticationFailed) as caught:
            await rig.call(presented)
        assert caught.value.code == "invalid_api_key"
    assert len(rig.upstream.calls) == 1


async def test_a_rotated_key_replaces_the_old_one() -> None:
    rig = Rig()
    record, old = await rig.keyring.create(tenant="acme", name="", policy=KeyPolicySettings())
    await rig.call(old)
    _, new = await rig.keyring.rotate(record.id)
    with pytest.raises(AuthenticationFailed):
        await rig.call(old)
    await rig.call(new)
    assert [c.ctx.principal.tenant for c in rig.upstream.calls] == ["acme", "acme"]


async def test_a_model_outside_the_keys_list_is_403_model_not_allowed() -> None:
    rig = Rig()
    _, key = await rig.keyring.create(tenant="t", name="", policy=KeyPolicySettings(models=("m",)))
    await rig.call(key, model="m")
    with pytest.raises(PermissionDenied) as caught:
        await rig.call(key, model="gpt-expensive")
    assert caught.value.code == "model_not_allowed"
    assert caught.value.to_json()["error"]["param"] == "model"
    assert len(rig.upstream.calls) == 1


async def test_config_keys_work_with_their_policy_and_are_not_kept_in_plaintext() -> None:
    listed = ApiKeySettings(
        key=SecretStr("cfg-secret-value"), tenant="ops", name="ops", rpm=1, models=("m",)
    )
    rig = Rig(config=[listed])
    await rig.call("cfg-secret-value")
    assert rig.upstream.calls[-1].ctx.principal.tenant == "ops"
    with pytest.raises(PermissionDenied):
        await rig.call("cfg-secret-value", model="other")
    assert "cfg-secret-value" not in repr(vars(rig.keyring))
    assert [r.id for r in await rig.keyring.list()] == ["cfg_ops"]
    for change in (rig.keyring.revoke, rig.keyring.rotate):
        with pytest.raises(BadRequest) as caught:
            await change("cfg_ops")
        assert caught.value.code == "key_in_config"


async def test_a_spent_daily_budget_is_429_until_the_next_utc_day() -> None:
    rig = Rig()
    policy = KeyPolicySettings(daily_budget_usd=0.015, monthly_budget_usd=0.025)
    record, key = await rig.keyring.create(tenant="t", name="", policy=policy)
    await rig.call(key)  # $0.01: under the day's budget
    await rig.call(key)  # admitted at $0.01, now $0.02
    with pytest.raises(BudgetExceeded) as caught:
        await rig.call(key)
    error = caught.value
    assert (error.status, error.code, error.type) == (429, "budget_exceeded", "insufficient_quota")
    assert "daily budget" in error.message
    assert "2026-04-01 00:00 UTC" in error.message
    assert error.headers()["x-should-retry"] == "false"
    assert error.headers()["retry-after"] == str(12 * 3600)
    labels = {"scope": "key", "priority": "default", "why": "budget"}
    assert rig.metrics.registry.get_sample_value("levergate_shed_total", labels) == 1
    rig.wall += 12 * 3600  # a new day (and month): both counters start again
    await rig.call(key)
    spent = await rig.budgets.spent(record.id)
    assert spent is not None
    assert spent.day == pytest.approx(0.01)
    assert len(rig.upstream.calls) == 3


async def test_the_monthly_budget_counts_every_day_of_the_month() -> None:
    rig = Rig()
    _record, key = await rig.keyring.create(
        tenant="t", name="", policy=KeyPolicySettings(monthly_budget_usd=0.02)
    )
    rig.wall -= 10 * 86_400
    await rig.call(key)
    rig.wall += 5 * 86_400
    await rig.call(key)
    rig.wall += 5 * 86_400
    with pytest.raises(BudgetExceeded) as caught:
        await rig.call(key)
    assert "monthly budget" in caught.value.message


async def test_streams_are_charged_when_they_close_and_cache_hits_are_free() -> None:
    rig = Rig()
    record, key = await rig.keyring.create(tenant="t", name="", policy=KeyPolicySettings())
    await rig.call(key, stream=True)
    hit = Context("r", headers={"authorization": f"Bearer {key}"})
    hit.trace.cache = CacheResult("exact", CacheOutcome.HIT)
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
    await rig.send(Call(kind="chat", body=body, ctx=hit))
    await rig.call(key, model="unlisted")  # priced at the `*` model's price
    spent = await rig.budgets.spent(record.id)
    assert spent is not None
    assert spent.month == pytest.approx(0.01 + 100 / 1e6)


async def test_a_key_over_its_rpm_is_refused_when_the_wait_passes_its_deadline() -> None:
    rig = Rig()
    _, key = await rig.keyring.create(tenant="t", name="", policy=KeyPolicySettings(rpm=1))
    _, other = await rig.keyring.create(tenant="t", name="", policy=KeyPolicySettings(rpm=1))
    await rig.call(key)
    with pytest.raises(RateLimited) as caught:
        await rig.call(key, deadline=rig.clock.now() + 1.0)
    assert caught.value.code == "key_rate_limited"
    await rig.call(other)  # each key has its own limit
    rig.clock.advance(61.0)
    await rig.call(key, deadline=rig.clock.now() + 1.0)
    assert len(rig.upstream.calls) == 3


async def test_a_spend_store_that_is_down_leaves_requests_admitted() -> None:
    dead = RedisSpendStore(
        redis_client(url="redis://127.0.0.1:1/0", timeout=0.2, what="t"), prefix="x:", timeout=0.2
    )
    rig = Rig(spend=dead)
    _, key = await rig.keyring.create(
        tenant="t", name="", policy=KeyPolicySettings(daily_budget_usd=1)
    )
    await rig.call(key)
    await rig.call(key)
    assert len(rig.upstream.calls) == 2
    await dead.aclose()


async def test_a_key_store_that_is_down_keeps_cached_keys_and_gives_503_to_others(
    tmp_path: Path,
) -> None:
    store = SqliteKeyStore(tmp_path / "keys.sqlite3", busy_timeout=0.1)
    clock = ManualClock()
    keyring = Keyring(config_keys=[], store=store, clock=clock, cache_seconds=5, timeout=1)
    _, key = await keyring.create(tenant="t", name="", policy=KeyPolicySettings())
    assert await keyring.resolve(key) is not None
    await store.aclose()  # from now on every read fails
    clock.advance(60)
    found = await keyring.resolve(key)
    assert found is not None
    assert found.tenant == "t"
    with pytest.raises(Overloaded) as caught:
        await keyring.resolve("lg-never-seen")
    assert caught.value.code == "key_store_unavailable"
    dead = RedisKeyStore(
        redis_client(url="redis://127.0.0.1:1/0", timeout=0.2, what="t"), prefix="x:"
    )
    keyring = Keyring(config_keys=[], store=dead, clock=clock, cache_seconds=5, timeout=1)
    with pytest.raises(Overloaded):
        await keyring.resolve("lg-any")
    await dead.aclose()


class Flaky(MemorySpendStore):
    """The memory spend store with an outage switch (fault injection, not a stand-in)."""

    down = False

    async def spent(self, key_id: str, periods: Periods) -> Spent:
        if self.down:
            raise SpendUnavailable("down")
        return await super().spent(key_id, periods)

    async def add(self, key_id: str, usd: float, periods: Periods) -> None:
        if self.down:
            raise SpendUnavailable("down")
        await super().add(key_id, usd, periods)


async def test_charges_made_while_the_spend_store_is_down_are_paid_when_it_returns() -> None:
    flaky = Flaky()
    rig = Rig(spend=flaky)
    record, key = await rig.keyring.create(tenant="t", name="", policy=KeyPolicySettings())
    flaky.down = True
    await rig.call(key)
    await rig.budgets.flush()  # the write fails: still owed, and the store rests
    await rig.call(key)
    flaky.down = False
    await rig.budgets.flush()  # within the cool-down: the store is not asked, all stays owed
    assert (await flaky.spent(record.id, Periods.at(rig.wall))).day == 0.0
    rig.clock.advance(5.0)
    await rig.call(key)
    await rig.budgets.flush()
    assert (await flaky.spent(record.id, Periods.at(rig.wall))).day == pytest.approx(0.03)


async def test_the_budget_job_writes_what_is_owed_and_a_check_sees_it_before_then() -> None:
    spend = MemorySpendStore()
    rig = Rig(spend=spend)
    record, key = await rig.keyring.create(tenant="t", name="", policy=KeyPolicySettings())
    await rig.call(key)
    assert (await spend.spent(record.id, Periods.at(rig.wall))).day == 0.0
    spent = await rig.budgets.spent(record.id)  # this process's view: what it owes included
    assert spent is not None
    assert spent.day == pytest.approx(0.01)
    job = asyncio.ensure_future(rig.budgets.run())
    await asyncio.sleep(0)
    rig.clock.advance(0.5)
    for _ in range(3):
        await asyncio.sleep(0)
    job.cancel()
    assert (await spend.spent(record.id, Periods.at(rig.wall))).day == pytest.approx(0.01)


async def test_a_keys_tpm_counts_the_tokens_used_not_the_reservation() -> None:
    rig = Rig()
    _, key = await rig.keyring.create(tenant="t", name="", policy=KeyPolicySettings(tpm=1000))
    await rig.call(key, max_tokens=400)  # reserves ~400 tokens (24 s of TPM), uses 150 (9 s)
    waiting = asyncio.ensure_future(rig.call(key, deadline=rig.clock.now() + 12.0))
    for _ in range(5):
        await asyncio.sleep(0)
    assert not waiting.done()  # it waits (9 s fits its 12 s deadline) instead of being refused
    rig.clock.advance(9.5)
    await waiting
    assert len(rig.upstream.calls) == 2
