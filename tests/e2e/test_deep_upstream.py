"""An upstream's answer nested past the gateway's JSON bound (issue 20, items 1 and 2: the bound
applies wherever JSON enters, upstream answers included): valid JSON 300 levels deep, which
orjson reads but cannot write back, is a 502 naming the upstream for a client, and a batch
line's error for the batch runner, which it used to take down for every tenant (writing the
line's result raised)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import orjson

from tests.e2e.conftest import GatewayFactory
from tests.e2e.hostile_upstream import hostile_upstream
from tests.e2e.test_batch_api import batch_settings


async def test_a_deep_answer_is_a_502_and_fails_one_batch_line_not_the_runner(
    gateway_at: GatewayFactory, tmp_path: Path
) -> None:
    async with (
        hostile_upstream() as upstream,
        gateway_at(upstream.base_url, batch=batch_settings(tmp_path)) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as http,
    ):
        asked = {"model": "deep-answer", "messages": [{"role": "user", "content": "hi"}]}
        answer = await http.post("/chat/completions", json=asked)
        assert answer.status_code == 502, answer.text
        models = {"deep": "deep-answer", "fine": "plain-answer"}
        lines = [{"custom_id": name, "method": "POST", "url": "/v1/chat/completions",
                  "body": {**asked, "model": model}} for name, model in models.items()]  # fmt: skip
        data = b"".join(orjson.dumps(item) + b"\n" for item in lines)
        uploaded = await http.post("/files", data={"purpose": "batch"},
                                   files={"file": ("in.jsonl", data)})  # fmt: skip
        made = await http.post("/batches", json={"input_file_id": uploaded.json()["id"],
                                                 "endpoint": "/v1/chat/completions",
                                                 "completion_window": "24h"})  # fmt: skip
        batch = made.json()
        for _ in range(600):
            batch = (await http.get(f"/batches/{batch['id']}")).json()
            if batch["status"] not in ("validating", "in_progress", "finalizing"):
                break
            await asyncio.sleep(0.05)
        assert batch["status"] == "completed", batch
        assert batch["request_counts"] == {"total": 2, "completed": 1, "failed": 1}
        errors = (await http.get(f"/files/{batch['error_file_id']}/content")).content
    error = orjson.loads(errors.splitlines()[0])
    assert error["custom_id"] == "deep"
    assert error["response"]["status_code"] == 502
