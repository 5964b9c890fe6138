"""One `stores.default` moves every piece of shared state: two real `levergate serve` processes
whose configuration names Redis and PostgreSQL only there share rate limits, the exact cache,
gateway keys, stored responses and batch jobs. A configuration written for the release before
(a URL in each section) still starts and serves, and logs what replaces each URL. Every section
on one Redis URL shares one connection pool.

Needs Redis at 127.0.0.1:6379 and PostgreSQL at 127.0.0.1:5432: skipped with a reason outside
CI, a failure under CI=true."""

from __future__ import annotations

import io
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import psycopg
import pytest
import yaml
from redis.asyncio import Redis

from levergate.config import Settings
from levergate.gateway import Gateway
from levergate.simulator import SimHandle
from levergate.testing.batch_crash import Gateway as Process
from levergate.testing.ports import free_port
from tests.e2e.conftest import USER
from tests.memcached_required import PrivateMemcached
from tests.postgres_required import postgres_database
from tests.redis_required import require_redis

REDIS_URL = "redis://127.0.0.1:6379/15"
OTHER_REDIS_URL = "redis://127.0.0.1:6379/14"
ADMIN = "admin-token-0123456789"
pytestmark = pytest.mark.timeout(120)


def prefixes(space: str) -> dict[str, Any]:
    """Key prefixes of this test's own (isolation from other runs on the same Redis only:
    where each piece of state lives is said by `stores` alone)."""
    return {
        "cache": {"store": {"redis_prefix": f"t:{space}:cache:"}},
        # A request that would wait for its limit sheds at once (429) instead of waiting.
        "traffic": {"redis_prefix": f"t:{{{space}}}:limits:",
                    "max_wait": {"interactive": 0.2, "default": 0.2, "batch": 0.2}},
        "auth": {"enabled": True, "store": {"redis_prefix": f"t:{{{space}}}:keys:",
                                             "cache_seconds": 0},
                 "spend": {"redis_prefix": f"t:{space}:spend:"}},
        "responses": {"store": {"redis_prefix": f"t:{{{space}}}:responses:"}},
    }  # fmt: skip


def write(path: Path, *, sim: SimHandle, port: int, **values: Any) -> Path:
    config = {
        "server": {"port": port},
        "upstreams": [{"name": "sim", "base_url": sim.base_url}],
        "models": [{"name": "m", "upstream": "sim"}],
        "admin": {"enabled": True, "token": ADMIN},
        **values,
    }
    path.write_text(yaml.safe_dump(config))
    return path


@asynccontextmanager
async def processes(configs: list[Path], tmp_path: Path) -> AsyncIterator[list[Process]]:
    started = []
    try:
        for index, config in enumerate(configs):
            port = yaml.safe_load(config.read_text())["server"]["port"]
            process = Process(config, port, tmp_path / f"gw{index}.log")
            started.append(process)
            await process.start()
        yield started
    finally:
        for process in started:
            process.stop()


async def purge(space: str) -> None:
    raw = Redis.from_url(REDIS_URL)
    names = [n async for n in raw.scan_iter(match=f"t:*{space}*")]
    if names:
        await raw.delete(*names)
    await raw.aclose()


def sdk(url: str, key: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=url, api_key=key, max_retries=0)


async def new_key(url: str, **policy: Any) -> str:
    async with httpx.AsyncClient(base_url=url.removesuffix("/v1")) as admin:
        made = await admin.post("/admin/keys", json={"tenant": "acme", **policy},
                                headers={"authorization": f"Bearer {ADMIN}"})  # fmt: skip
    assert made.status_code == 201, made.text
    return str(made.json()["key"])


async def test_one_stores_default_shares_every_piece_of_state_between_two_processes(
    sim: SimHandle, tmp_path: Path
) -> None:
    await require_redis(REDIS_URL)
    space = uuid.uuid4().hex
    async with postgres_database("levergate_stores") as dsn:
        stores = {"default": {"redis_url": REDIS_URL, "postgres_dsn": dsn}}
        batch = {"enabled": True, "dir": str(tmp_path / "files"), "poll_seconds": 0.05}
        configs = [
            write(tmp_path / f"{name}.yaml", sim=sim, port=free_port(), stores=stores,
                  batch=batch, **prefixes(space))
            for name in ("a", "b")
        ]  # fmt: skip
        try:
            async with processes(configs, tmp_path) as (a, b):
                await shares_state(a.url, b.url, sim)
            # Each piece lives where `stores.default` says, not in a file both processes see.
            raw = Redis.from_url(REDIS_URL)
            kept = b" ".join([n async for n in raw.scan_iter(match=f"t:*{space}*")])
            await raw.aclose()
            for piece in (b":cache:", b":limits:", b":keys:", b":responses:"):
                assert piece in kept, piece
            async with await psycopg.AsyncConnection.connect(dsn) as pg:
                jobs = await (await pg.execute("SELECT count(*) FROM lg_jobs")).fetchone()
            assert jobs == (1,)
        finally:
            await purge(space)


async def shares_state(a: str, b: str, sim: SimHandle) -> None:
    # Keys: made through A, valid on B.
    key = await new_key(a)
    async with sdk(a, key) as on_a, sdk(b, key) as on_b:
        # The exact cache: A's miss is B's hit.
        asked = {"model": "m", "messages": USER, "temperature": 0}
        await on_a.chat.completions.create(**asked)  # type: ignore[call-overload]
        before = sim.stats()["requests_total"]
        raw = await on_b.chat.completions.with_raw_response.create(**asked)  # type: ignore[call-overload]
        assert raw.headers["x-levergate-cache"].startswith("hit")
        assert sim.stats()["requests_total"] == before
        # Stored responses: made through A, read through B.
        made = await on_a.responses.create(model="m", input="Say something simulated.")
        assert (await on_b.responses.retrieve(made.id)).output_text == made.output_text
        # Batch jobs: created through A, seen (and run) by B.
        upload = await on_a.files.create(file=("in.jsonl", io.BytesIO(line())), purpose="batch")
        job = await on_a.batches.create(input_file_id=upload.id, endpoint="/v1/chat/completions",
                                        completion_window="24h")  # fmt: skip
        assert (await on_b.batches.retrieve(job.id)).id == job.id
    # Rate limits: a key allowed one request a minute is spent through A and refused by B.
    slow = await new_key(a, rpm=1)
    async with sdk(a, slow) as on_a, sdk(b, slow) as on_b:
        await on_a.chat.completions.create(model="m", messages=USER)
        with pytest.raises(openai.RateLimitError):
            await on_b.chat.completions.create(model="m", messages=USER)


def line() -> bytes:
    body = {"model": "m", "messages": USER}
    return orjson.dumps({"custom_id": "one", "method": "POST", "url": "/v1/chat/completions",
                         "body": body}) + b"\n"  # fmt: skip


async def test_a_config_of_the_release_before_still_starts_and_says_what_replaces_it(
    sim: SimHandle, tmp_path: Path
) -> None:
    await require_redis(REDIS_URL)
    space = uuid.uuid4().hex
    async with postgres_database("levergate_stores_old") as dsn:
        old = {  # every section with its own URL, as the release before documented
            "traffic": {"store": "redis", "redis_url": REDIS_URL,
                        "redis_prefix": f"t:{{{space}}}:limits:"},
            "cache": {"store": {"backend": "redis", "redis_url": REDIS_URL,
                                "redis_prefix": f"t:{space}:cache:"}},
            "auth": {"store": {"backend": "redis", "redis_url": REDIS_URL,
                               "redis_prefix": f"t:{{{space}}}:keys:"}},
            "batch": {"enabled": True, "dir": str(tmp_path / "files"),
                      "store": {"backend": "postgres", "postgres_dsn": dsn}},
        }  # fmt: skip
        config = write(tmp_path / "old.yaml", sim=sim, port=free_port(), **old)
        try:
            async with processes([config], tmp_path) as (gateway,):
                key = await new_key(gateway.url)
                async with openai.AsyncOpenAI(base_url=gateway.url, api_key="-") as client:
                    for _ in range(2):
                        raw = await client.chat.completions.with_raw_response.create(
                            model="m", messages=USER, temperature=0
                        )
                assert raw.headers["x-levergate-cache"].startswith("hit")
                raw_redis = Redis.from_url(REDIS_URL)
                kept = [n async for n in raw_redis.scan_iter(match=f"t:*{space}*")]
                await raw_redis.aclose()
                assert any(b":keys:" in n for n in kept)
                assert any(b":cache:" in n for n in kept)
                assert key.startswith("lg-")
        finally:
            await purge(space)
    log = (tmp_path / "gw0.log").read_text()
    for old_key, new in [("traffic.redis_url", "stores.default.redis_url"),
                         ("cache.store.redis_url", "cache.store.connection"),
                         ("auth.store.redis_url", "auth.store.connection"),
                         ("batch.store.postgres_dsn", "stores.default.postgres_dsn")]:  # fmt: skip
        assert any(old_key in row and new in row and "deprecated" in row
                   for row in log.splitlines()), (old_key, log)  # fmt: skip
    assert dsn not in log


async def test_every_section_on_one_redis_url_shares_one_pool() -> None:
    await require_redis(REDIS_URL)
    one = {"default": {"redis_url": REDIS_URL}}
    async with Gateway(Settings.load(
        upstreams=[{"name": "p", "base_url": "http://127.0.0.1:9"}],
        models=[{"name": "m", "upstream": "p"}], stores=one,
        admin={"enabled": True, "token": ADMIN}, auth={"enabled": True},
    )) as gateway:  # fmt: skip
        assert gateway.pipeline.shared.stores.pools == 1
    # Two connections on two URLs: two pools, whichever sections take them.
    two = {**one, "other": {"redis_url": OTHER_REDIS_URL}}
    async with Gateway(Settings.load(
        upstreams=[{"name": "p", "base_url": "http://127.0.0.1:9"}],
        models=[{"name": "m", "upstream": "p"}], stores=two,
        traffic={"connection": "other"}, admin={"enabled": True, "token": ADMIN},
    )) as gateway:  # fmt: skip
        assert gateway.pipeline.shared.stores.pools == 2


async def test_a_memcached_connection_shares_the_exact_cache(sim: SimHandle) -> None:
    memcached = PrivateMemcached()
    memcached.start()
    stores = {"default": {"memcached_address": memcached.address}}
    try:
        async with (
            Gateway(Settings.for_upstream(sim.base_url, stores=stores)) as one,
            Gateway(Settings.for_upstream(sim.base_url, stores=stores)) as two,
        ):
            await one.chat(model="m", messages=USER, temperature=0)
            before = sim.stats()["requests_total"]
            await two.chat(model="m", messages=USER, temperature=0)
            assert sim.stats()["requests_total"] == before  # answered from Memcached
            assert one.pipeline.shared.cache is not None
            assert one.pipeline.shared.cache.where.backend == "memcached"
            assert two.pipeline.shared.stores.pools == 0  # no Redis anywhere
    finally:
        memcached.stop()
