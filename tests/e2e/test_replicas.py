"""Three `levergate serve` replicas behind a real HAProxy, sharing Redis and PostgreSQL through
one `stores.default`, with `levergate sim` as the provider; every request through the balancer
(levergate/testing/replicas.py, replicas_checks.py; benchmarks/replicas.py runs the same longer).

Needs Redis, PostgreSQL and HAProxy: skipped with a reason outside CI, a failure under CI."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import pytest

from levergate.testing import replicas_checks as checks
from levergate.testing.replicas import REDIS_URL, deployment, replica_config
from tests.postgres_required import postgres_database
from tests.redis_required import require_redis
from tests.required import program

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def require_haproxy() -> None:
    program("haproxy", install=".ci/run installs it")


async def test_replicas_share_limits_caches_keys_and_budgets(tmp_path: Path) -> None:
    await require_redis(REDIS_URL)
    require_haproxy()
    async with (
        postgres_database("levergate_replicas") as dsn,
        deployment(tmp_path, dsn, sim_flags=checks.SIM_LIMITS,
                   key_limits=checks.KEY_LIMITS) as d,
    ):  # fmt: skip
        # Shared limits at 3x each one's rate for a window each (benchmarks/replicas.py runs
        # longer): RPM, then TPM.
        for phase in await checks.shared_limits(d, windows=1):
            assert phase.load.failures == [], phase.limit
            assert phase.load.limited > 0, phase.limit  # the offered load was over the limit...
            assert phase.upstream_429s == 0, phase.limit  # ...and upstream never saw 1.02x it
        # Caches: the exact cache's miss on one replica is a hit on the next; a paraphrase of
        # an answer stored through one is a semantic hit on all three.
        (first, first_cache), (second, second_cache), calls = await checks.exact_cache(d)
        assert first != second
        assert (first_cache, second_cache, calls) == ("miss", "hit", 0)
        assert await checks.semantic_cache(d) == {"r0": "semantic", "r1": "semantic",
                                                  "r2": "semantic"}  # fmt: skip
        # Keys: made and revoked through the admin API, on whichever replica, hold on all.
        served, refused = await checks.keys_everywhere(d)
        assert set(served) == set(refused) == {"r0", "r1", "r2"}
        # A budget spent by three clients at once, across replicas: at most one request per
        # replica beyond it.
        spent = await checks.budget(d)
        assert spent.refused == 3
        assert spent.admitted <= math.ceil(spent.budget / spent.cost) + 3
        assert spent.spent <= spent.budget + 3 * spent.cost * 1.01


async def test_a_batch_survives_a_kill_and_a_rolling_restart_fails_nothing(
    tmp_path: Path,
) -> None:
    await require_redis(REDIS_URL)
    require_haproxy()
    async with (
        postgres_database("levergate_replicas_roll") as dsn,
        deployment(tmp_path, dsn, sim_flags=("--ttft-ms", "20", "--tokens-per-second", "200"))
        as d,
    ):  # fmt: skip
        record = await checks.batch_with_a_kill(d, lines=120)
        assert (record.lost, record.duplicated_in_output, record.mismatched) == (0, 0, 0)
        assert record.lines == 120
        load = await checks.rolling_restart(d)
        assert load.failures == []
        assert load.ok > 0
        for log in d.logs:
            assert "Traceback" not in log.read_text()


async def test_a_replica_whose_limits_disagree_is_logged_loudly_at_start(tmp_path: Path) -> None:
    await require_redis(REDIS_URL)
    require_haproxy()
    async with (
        postgres_database("levergate_replicas_bad") as dsn,
        deployment(tmp_path, dsn, key_limits={"rpm": checks.RPM}, replicas=2) as d,
    ):  # fmt: skip
        assert all("SHARED LIMIT MISMATCH" not in log.read_text() for log in d.logs)
        # A third replica started with another rpm for the same shared key.
        from levergate.testing.batch_crash import Gateway
        from levergate.testing.ports import free_port

        port = free_port()
        config = replica_config(tmp_path / "odd.yaml", port=port, sim_url=d.sim_url, dsn=dsn,
                                space=d.space, files=tmp_path / "files",
                                key_limits={"rpm": 2 * checks.RPM})  # fmt: skip
        odd = Gateway(config, port, tmp_path / "odd.log")
        await odd.start()
        try:
            for _ in range(200):
                if "SHARED LIMIT MISMATCH" in odd.log.read_text():
                    break
                await asyncio.sleep(0.05)
        finally:
            odd.stop()
        line = next(r for r in odd.log.read_text().splitlines() if "SHARED LIMIT MISMATCH" in r)
        assert "key:sim" in line
        assert f"rpm={2 * checks.RPM} here, {checks.RPM} there" in line
        assert "ERROR" in line
