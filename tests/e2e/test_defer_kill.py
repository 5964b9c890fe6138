"""A gateway killed with SIGKILL mid-deferral resumes polling the provider batch it submitted,
and never submits it again: real `levergate serve --config` processes in front of the
simulator (in this process, so it outlives them), whose batch API takes a few seconds."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import openai
import pytest
import yaml

from levergate.simulator import SimSettings, run_simulator
from levergate.simulator.settings import BatchApiSettings
from levergate.testing.batch_crash import Gateway
from levergate.testing.ports import free_port
from tests.e2e.test_batch_api import finished, jsonl, lines_of
from tests.e2e.test_defer import MODEL, line

LINES = 30


def config(tmp: Path, *, sim_url: str, port: int) -> Path:
    data = {
        "server": {"port": port},
        "upstreams": [{"name": "sim", "base_url": sim_url, "api_key": "sk-sim-openai"}],
        "models": [{"name": MODEL, "upstream": "sim"}],
        "batch": {"enabled": True, "dir": str(tmp / "files"), "lease_seconds": 1.0,
                  "poll_seconds": 0.05, "store": {"sqlite_path": str(tmp / "jobs.sqlite3")}},
        "defer": {"enabled": True, "routes": {MODEL: {}}, "poll_first_seconds": 0.1,
                  "poll_max_seconds": 0.3},
    }  # fmt: skip
    path = tmp / "levergate.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


async def created(root: str) -> int:
    async with httpx.AsyncClient() as http:
        found = (await http.get(f"{root}/sim/stats")).json()
    return int(found["batch_api"]["batches_created"])


@pytest.mark.timeout(180)
async def test_killed_mid_deferral_the_gateway_resumes_polling_without_resubmitting(
    tmp_path: Path,
) -> None:
    async with run_simulator(
        SimSettings(port=0, batch_api=BatchApiSettings(turnaround_seconds=4.0))
    ) as sim:
        port = free_port()
        gateway = Gateway(config(tmp_path, sim_url=sim.base_url, port=port), port,
                          tmp_path / "gateway.log")  # fmt: skip
        url = f"http://127.0.0.1:{port}/v1"
        await gateway.start()
        client = openai.AsyncOpenAI(base_url=url, api_key="x", max_retries=2)
        try:
            lines = [line(f"k{i}") for i in range(LINES)]
            uploaded = await client.files.create(file=("in.jsonl", jsonl(lines)), purpose="batch")
            batch = await client.batches.create(input_file_id=uploaded.id,
                                                endpoint="/v1/chat/completions",
                                                completion_window="24h")  # fmt: skip
            for _ in range(400):  # until the provider batch exists: the kills land mid-poll
                if await created(sim.root_url):
                    break
                await asyncio.sleep(0.02)
            for _ in range(2):
                gateway.kill()
                await gateway.start()
                await asyncio.sleep(0.5)
            done = await finished(client, batch.id)
            output = await lines_of(client, done.output_file_id)
        finally:
            gateway.kill()
            await client.close()
        assert done.status == "completed"
        assert sorted(o["custom_id"] for o in output) == sorted(f"k{i}" for i in range(LINES))
        assert await created(sim.root_url) == 1  # resumed, never resubmitted
        async with httpx.AsyncClient() as http:
            seen = (await http.get(f"{sim.root_url}/sim/stats")).json()
        assert seen["batch_api"]["lines_answered"] == LINES
        assert "/v1/chat/completions" not in seen["requests_by_endpoint"]
