"""Every way a request can finish reaches a `Deps` sink as one record (issue 21 §2): through the
proxy, in-process, a Batch API line, an async request, and a cascade whose cheap side call is
in the record, marked as such (the deferred line: tests/unit/batch/test_deferral.py). One
gateway, built by the composition root, against the simulator on loopback."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson

from levergate.app import build_gateway
from levergate.config import Settings
from levergate.core.controls import Priority
from levergate.layers.measure.record import SCHEMA, RequestRecord
from levergate.pipeline import Deps
from levergate.server.run import serving
from levergate.simulator import SimSettings, run_simulator

HARD_SIM = {"marker": "HARD", "strong_models": ["sim-large"]}
EASY = [{"role": "user", "content": "What is two plus two?"}]


class Records:
    def __init__(self) -> None:
        self.seen: dict[str, RequestRecord] = {}

    def emit(self, record: RequestRecord) -> None:
        self.seen[record.request_id] = record

    async def wait_for(self, *ids: str) -> list[RequestRecord]:
        for _ in range(400):
            if all(i in self.seen for i in ids):
                return [self.seen[i] for i in ids]
            await asyncio.sleep(0.05)
        raise AssertionError(f"no record for {[i for i in ids if i not in self.seen]}")


def settings(base_url: str, tmp: Path) -> Settings:
    return Settings.load(
        server={"port": 0},
        traffic={"retry": {"enabled": False}},
        upstreams=[{"name": "sim", "base_url": base_url}],
        models=[{"name": "small", "upstream": "sim", "upstream_model": "sim-small"},
                {"name": "large", "upstream": "sim", "upstream_model": "sim-large"}],
        cascade={"checks": [{"kind": "mean_logprob", "threshold": -0.5}]},
        batch={"enabled": True, "dir": str(tmp / "files"), "poll_seconds": 0.05,
               "store": {"sqlite_path": str(tmp / "batch.sqlite3")}},
        async_requests={"enabled": True},
    )  # fmt: skip


async def until(http: httpx.AsyncClient, path: str, *, done: tuple[str, ...]) -> dict[str, Any]:
    for _ in range(400):
        found: dict[str, Any] = (await http.get(path)).json()
        if found["status"] in done:
            return found
        await asyncio.sleep(0.05)
    raise AssertionError(f"{path} never finished")


async def batch_of_one(url: str) -> str:
    """A one-line batch through the official SDK, run to the end: its id."""
    line = {"custom_id": "only", "method": "POST", "url": "/v1/chat/completions",
            "body": {"model": "small", "messages": EASY, "max_tokens": 3}}  # fmt: skip
    async with openai.AsyncOpenAI(base_url=url, api_key="x", max_retries=0) as client:
        uploaded = await client.files.create(file=("in.jsonl", orjson.dumps(line) + b"\n"),
                                             purpose="batch")  # fmt: skip
        batch = await client.batches.create(input_file_id=uploaded.id, completion_window="24h",
                                            endpoint="/v1/chat/completions")  # fmt: skip
        for _ in range(400):
            if (await client.batches.retrieve(batch.id)).status == "completed":
                return batch.id
            await asyncio.sleep(0.05)
    raise AssertionError("the batch never completed")


async def test_a_deps_sink_sees_every_kind_of_finished_request(tmp_path: Path) -> None:
    records = Records()
    hard = SimSettings.model_validate({"port": 0, "hard": HARD_SIM})
    async with (
        run_simulator(hard) as sim,
        build_gateway(settings(sim.base_url, tmp_path), deps=Deps(sinks=[records])) as gw,
        serving(gw) as url,
        httpx.AsyncClient(base_url=url) as http,
    ):
        chat = {"model": "small", "messages": EASY, "max_tokens": 3}
        headers = {
            "x-request-id": "proxy-1",
            "x-levergate-workflow": "wf-7",
            "x-levergate-priority": "interactive",
            "x-levergate-timeout": "30",
        }
        assert (await http.post("/chat/completions", json=chat, headers=headers)).status_code == 200
        await gw.chat(model="small", messages=EASY, max_tokens=3, headers={"x-request-id": "lib-1"})
        cascade = {"model": "cascade:small>large", "max_tokens": 8, "logprobs": True,
                   "messages": [{"role": "user", "content": "HARD: prove it."}]}  # fmt: skip
        answer = await http.post("/chat/completions", json=cascade,
                                 headers={"x-request-id": "cascade-1"})  # fmt: skip
        assert answer.status_code == 200
        accepted = await http.post("/async/chat/completions", json=chat)
        assert accepted.status_code == 202
        async_id = accepted.json()["id"]
        await until(http, f"/async/{async_id}", done=("completed",))
        batch_id = await batch_of_one(url)
        proxy, library, escalated, queued, line = await records.wait_for(
            "proxy-1", "lib-1", "cascade-1", f"{async_id}-0", f"{batch_id}-0"
        )
    assert (proxy.origin, proxy.kind, proxy.schema) == ("request", "chat", SCHEMA)
    assert (proxy.workflow, proxy.priority, proxy.tier) == (
        "wf-7",
        Priority.INTERACTIVE,
        "standard",
    )
    assert proxy.deadline is not None
    assert proxy.tokens.output > 0
    assert (library.origin, library.workflow, library.deadline) == ("request", None, None)
    assert escalated.decision is not None
    assert (escalated.decision.router, escalated.decision.chosen) == ("cascade", "large")
    assert escalated.escalations == 1
    assert escalated.escalation_reasons[0].startswith("small rejected by mean_logprob")
    assert [side.purpose for side in escalated.side] == ["cascade"]  # the cheap call, marked
    assert escalated.alias == "large"
    assert (queued.origin, queued.priority) == ("async", Priority.BATCH)
    assert (line.origin, line.priority, line.kind) == ("batch", Priority.BATCH, "chat")
    assert line.tokens.output > 0
