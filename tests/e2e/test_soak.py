"""The CI-sized soak (issue 20's "Done when"): a real `levergate serve` with every feature on (the
job store in PostgreSQL), two tenants, two rounds of a 30 s solo block then a 30 s attacked one
(over two minutes in all, the issue's CI size); the hostile tenant does issue 20's items 1, 3,
4, 5 and 6 at once, at fixed rates (levergate/testing/soak.py, levergate/testing/soak_attack.py).
The victim tenant must see no error at all, and its p99 under attack stays within 2x of its solo
p99 — the issue's acceptance criterion, the one latency assertion in the suite: 960 samples a
side at 16 requests a second, the blocks alternated to cancel the machine's drift, the ratio
printed; no other test runs meanwhile (`alone`, tests/alone.py: on CI, beside another worker's
tests, the ratio read 2.19x). Longer runs: benchmarks/soak.py (results/soak.md)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from levergate.testing.soak import REDIS_URL, Plan, soak
from tests.postgres_required import postgres_database
from tests.redis_required import require_redis

pytestmark = [pytest.mark.slow, pytest.mark.alone, pytest.mark.timeout(900)]


async def test_a_hostile_tenant_leaves_the_other_unharmed(tmp_path: Path) -> None:
    await require_redis(REDIS_URL)
    async with postgres_database("levergate_soak") as dsn:
        plan = Plan(block_seconds=30.0, rounds=2, victim_rate=16.0, postgres_dsn=dsn)
        result = await asyncio.to_thread(soak, tmp_path, plan)
    print(json.dumps(result, indent=2))

    assert result["victim_errors"] == [], result["victim_errors"][:10]
    assert result["gateway_alive"]
    assert result["tracebacks"] == 0
    # Every victim request of every block was answered (the rate times the block).
    assert result["victim_requests"] == {"solo": 960, "attacked": 960}
    # The attack reached what it attacks (else the ratio proves nothing): deep lines refused at
    # upload and at the bound run, chains of large turns stored and continued, lines queued,
    # requests waiting on the hanging receiver, uploads stalled and timed out, embeddings at
    # the copy bound answered, and the tenant's quotas reached.
    seen = result["attack_outcomes"]
    for outcome in ("deep-upload 400", "deep-batch 200", "responses 200", "flood-batch 200",
                    "async 202", "upload 200", "stalled 408", "embeddings 200"):  # fmt: skip
        assert seen.get(outcome, 0) > 0, (outcome, seen)
    quota = ("upload 413", "upload 429", "async 429", "flood-batch 429", "deep-batch 429")
    assert any(seen.get(outcome) for outcome in quota), seen
    ratio = result["p99_ratio"]
    print(f"victim p99 attacked / solo: {ratio}x ({result['victim_p99_ms']})")
    assert ratio <= 2.0, result["blocks"]
