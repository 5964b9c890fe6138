"""Configuration reload of a real `levergate serve --config` process: `POST /admin/reload` and
SIGHUP read the file again and swap the pipeline for new requests, while a stream already
running finishes on the old one; a file that does not validate is refused (400 naming the
field) and the old configuration keeps serving; reloads under steady load fail no request; a
storm of SIGHUPs is coalesced (tests/unit/server/test_reload.py has the same in one process)."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml

from levergate.simulator import SimHandle, SimSettings, run_simulator
from levergate.simulator.settings import LatencySettings
from levergate.testing.batch_crash import Gateway as Process
from levergate.testing.ports import free_port
from tests.e2e.conftest import USER

ADMIN = "admin-token-0123456789"
pytestmark = pytest.mark.timeout(120)


def write(path: Path, *, sim: SimHandle, port: int, models: list[str], **values: Any) -> None:
    config = {
        "server": {"port": port, "graceful_shutdown_seconds": 10},
        "upstreams": [{"name": "sim", "base_url": sim.base_url}],
        "models": [{"name": name, "upstream": "sim"} for name in models],
        "admin": {"enabled": True, "token": ADMIN},
        **values,
    }
    path.write_text(yaml.safe_dump(config))


@asynccontextmanager
async def served(tmp_path: Path, sim: SimHandle) -> AsyncIterator[tuple[Process, Path]]:
    config, port = tmp_path / "levergate.yaml", free_port()
    write(config, sim=sim, port=port, models=["a"])
    process = Process(config, port, tmp_path / "gw.log")
    await process.start()
    try:
        yield process, config
    finally:
        process.stop()


async def reload(url: str) -> httpx.Response:
    async with httpx.AsyncClient(base_url=url.removesuffix("/v1"), timeout=30) as admin:
        return await admin.post("/admin/reload", headers={"authorization": f"Bearer {ADMIN}"})


async def served_models(client: openai.AsyncOpenAI) -> set[str]:
    return {m.id async for m in client.models.list()}


async def test_a_reload_swaps_the_pipeline_and_a_bad_file_is_refused(tmp_path: Path) -> None:
    # Slow decoding: a stream of 30 tokens takes about a second, long enough to span a reload.
    slow = SimSettings(port=0, latency=LatencySettings(tokens_per_second=30))
    async with run_simulator(slow) as sim, served(tmp_path, sim) as (process, config):
        client = openai.AsyncOpenAI(base_url=process.url, api_key="-", max_retries=0)
        stream = await client.chat.completions.create(model="a", messages=USER, stream=True,
                                                      max_tokens=30)  # fmt: skip
        # A file that does not validate: refused, naming the field; "a" still served.
        write(config, sim=sim, port=process.port, models=["b"], traffic={"max_queue": 0})
        refused = await reload(process.url)
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["code"] == "invalid_config"
        assert "traffic.max_queue" in refused.json()["error"]["message"]
        assert await served_models(client) == {"a"}
        # A good one: swapped for new requests...
        write(config, sim=sim, port=process.port, models=["b"])
        done = await reload(process.url)
        assert done.status_code == 200, done.text
        assert done.json()["models"] == ["b"]
        assert await served_models(client) == {"b"}
        with pytest.raises(openai.NotFoundError):
            await client.chat.completions.create(model="a", messages=USER)
        # ...while the stream that began before it finishes on the old pipeline, whole.
        chunks = [c async for c in stream]
        assert chunks[-1].choices[0].finish_reason == "length"
        assert sum(bool(c.choices and c.choices[0].delta.content) for c in chunks) == 30
        # SIGHUP: the same from a signal; a bad file is refused and logged, nothing changes.
        write(config, sim=sim, port=process.port, models=["c"])
        assert process.proc is not None
        process.proc.send_signal(signal.SIGHUP)
        await until(lambda: served_models(client), {"c"})
        write(config, sim=sim, port=process.port, models=["d"], traffic={"max_queue": 0})
        process.proc.send_signal(signal.SIGHUP)
        await until(lambda: log_has(process, "reload refused (SIGHUP)"), expected=True)
        assert await served_models(client) == {"c"}
        await client.close()
    assert "Traceback" not in process.log.read_text()


async def log_has(process: Process, text: str) -> bool:
    return text in process.log.read_text()


async def until(probe: Any, expected: Any = None, *, tries: int = 200) -> None:
    for _ in range(tries):
        if await probe() == expected:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never reached {expected!r}")


@dataclass
class Load:
    answered: int = 0
    failures: list[BaseException] = field(default_factory=list)


@asynccontextmanager
async def steady_load(url: str) -> AsyncIterator[Load]:
    """Six clients, every other one streaming, asking back to back until the block ends."""
    load = Load()
    stop = asyncio.Event()

    async def client_loop(stream: bool) -> None:
        async with openai.AsyncOpenAI(base_url=url, api_key="-", max_retries=0) as client:
            while not stop.is_set():
                try:
                    if stream:
                        got = await client.chat.completions.create(
                            model="a", messages=USER, stream=True
                        )
                        assert [c async for c in got]
                    else:
                        await client.chat.completions.create(model="a", messages=USER)
                    load.answered += 1
                except Exception as exc:
                    load.failures.append(exc)

    clients = [asyncio.create_task(client_loop(i % 2 == 0)) for i in range(6)]
    try:
        yield load
    finally:
        stop.set()
        await asyncio.gather(*clients)


async def test_reloads_under_load_fail_no_request(sim: SimHandle, tmp_path: Path) -> None:
    async with served(tmp_path, sim) as (process, config):
        async with steady_load(process.url) as load:
            for round_ in range(5):
                # Each reload changes something real: the exact cache on and off.
                write(config, sim=sim, port=process.port, models=["a"],
                      cache={"enabled": round_ % 2 == 0})  # fmt: skip
                assert (await reload(process.url)).status_code == 200
                await asyncio.sleep(0.2)
        assert load.failures == []
        assert load.answered > 0


async def test_a_sighup_storm_is_coalesced_and_fails_no_request(
    sim: SimHandle, tmp_path: Path
) -> None:
    """100 SIGHUPs 2 ms apart, under load. Coalesced, at most one reload runs and one more is
    owed at any moment, so once the last signal is sent at most three more reloads follow
    (the running one, the one owed, and one owed to signals the loop had yet to read); uncoalesced,
    a backlog of one reload per signal (tens on this machine) is still to run. No request fails,
    and the file as last written is the one that serves."""
    async with served(tmp_path, sim) as (process, config):
        assert process.proc is not None
        async with steady_load(process.url) as load:
            await until(lambda: answered(load), expected=True)
            write(config, sim=sim, port=process.port, models=["a", "storm"])
            for _ in range(100):
                process.proc.send_signal(signal.SIGHUP)
                await asyncio.sleep(0.002)
            during = swaps(process)
            async with openai.AsyncOpenAI(base_url=process.url, api_key="-") as client:
                await until(lambda: served_models(client), {"a", "storm"})
            await asyncio.sleep(0.5)  # a backlog, if any, runs while the clients ask
        after = swaps(process) - during
        assert during >= 1
        assert after <= 3, f"{after} reloads after the storm ({during} during it)"
        assert load.failures == []
        assert process.proc.poll() is None
    assert "Traceback" not in process.log.read_text()


def swaps(process: Process) -> int:
    return process.log.read_text().count("reload: configuration swapped")


async def answered(load: Load) -> bool:
    return load.answered > 0
