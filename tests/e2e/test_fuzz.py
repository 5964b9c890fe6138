"""The standing fuzz: 10,000 generated hostile requests against a real `levergate serve` process
(auth on, exact cache in Redis) in front of a real `levergate sim`, over raw sockets.

Passes when every request got a status line within the bound, no status was a 5xx other than
502/504, the gateway is still alive and healthy afterwards, and its log holds no traceback.
The long run is benchmarks/fuzz.py.
"""

from __future__ import annotations

import asyncio
import subprocess
import uuid
from pathlib import Path

from redis.asyncio import Redis

from levergate.testing.fuzzing import (
    REDIS_URL,
    SIM_ARGS,
    RawRequest,
    fuzz,
    gateway_config,
    hostile_requests,
    send,
)
from levergate.testing.ports import free_port
from tests.e2e.test_cli import LEVERGATE, wait_for
from tests.redis_required import require_redis

COUNT = 10_000
KEY = "lg-fuzz-key"


async def test_ten_thousand_hostile_requests_get_clean_answers(
    tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    await require_redis(REDIS_URL)
    prefix = f"levergate:fuzz:{uuid.uuid4().hex}:"
    sim_port, port = free_port(), free_port()
    sim = [*LEVERGATE, "sim", *SIM_ARGS, "--port", str(sim_port)]
    processes.append(subprocess.Popen(sim, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    wait_for(sim_port, processes[-1])
    config = gateway_config(tmp_path, sim_port=sim_port, port=port, key=KEY, redis_prefix=prefix)
    with (tmp_path / "gateway.log").open("wb") as log:
        serve = [*LEVERGATE, "serve", "--config", str(config)]
        gateway = subprocess.Popen(serve, stdout=log, stderr=subprocess.STDOUT)
    processes.append(gateway)
    wait_for(port, gateway)

    report = await fuzz("127.0.0.1", port, hostile_requests(seed=20261201, key=KEY), count=COUNT)

    shown = [
        f"{why}: {r.method} {r.path} {r.headers} {r.body[:300]!r}" for r, why in report.failures
    ]
    assert report.sent == COUNT
    assert not shown, f"{len(shown)} bad answers; first ones:\n" + "\n".join(shown[:10])
    assert gateway.poll() is None, "the gateway died"
    health = RawRequest("GET", "/healthz", (), b"")
    assert await asyncio.wait_for(send("127.0.0.1", port, health, timeout=10), 15) == 200
    text = (tmp_path / "gateway.log").read_text(errors="replace")
    assert "Traceback" not in text, text[text.index("Traceback") :][:3000]
    redis = Redis.from_url(REDIS_URL)
    async for name in redis.scan_iter(match=f"{prefix}*"):
        await redis.delete(name)
    await redis.aclose()
    # Every family of answer was reached: the fuzz is not stuck on one error path.
    assert {200, 400, 401, 404, 405} <= set(report.statuses), report.statuses
