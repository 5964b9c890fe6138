"""A Batch API job through the official OpenAI SDK, in-process: upload a JSONL file of
requests, create the batch, wait for it, read the answers — levergate runs it on its own
durable runner (SQLite here) against the upstream, at batch priority.

    python examples/batch_job_through_the_sdk.py

Runs against the simulator, started here; the batch store lives in a temporary folder.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path

import httpx
import openai

from levergate import Settings
from levergate.app import build_gateway
from levergate.server.transport import GatewayTransport
from levergate.simulator import SimSettings, run_simulator

QUESTIONS = ["What is 2+2?", "Name a colour.", "Say hello."]


def batch_input() -> bytes:
    lines = [
        {"custom_id": f"q{n}", "method": "POST", "url": "/v1/chat/completions",
         "body": {"model": "m", "max_tokens": 4,
                  "messages": [{"role": "user", "content": question}]}}
        for n, question in enumerate(QUESTIONS)
    ]  # fmt: skip
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


async def main(folder: Path) -> None:
    async with run_simulator(SimSettings(port=0)) as sim:
        settings = Settings.for_upstream(
            sim.base_url,
            batch={"enabled": True, "dir": str(folder / "files"), "poll_seconds": 0.05,
                   "store": {"sqlite_path": str(folder / "batch.sqlite3")}},
        )  # fmt: skip
        async with build_gateway(settings) as gw:
            http = httpx.AsyncClient(transport=GatewayTransport(gw))
            async with openai.AsyncOpenAI(
                base_url="http://levergate/v1",
                api_key="unused",
                http_client=http,  # type: ignore[arg-type]  # it takes httpx clients too
            ) as sdk:
                uploaded = await sdk.files.create(
                    file=("questions.jsonl", batch_input()), purpose="batch"
                )
                batch = await sdk.batches.create(
                    input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                    completion_window="24h",
                )  # fmt: skip
                for _ in range(600):
                    batch = await sdk.batches.retrieve(batch.id)
                    if batch.status in ("completed", "failed", "expired", "cancelled"):
                        break
                    await asyncio.sleep(0.05)
                assert batch.status == "completed", batch.status
                assert batch.output_file_id is not None
                output = await sdk.files.content(batch.output_file_id)
    answers = {line["custom_id"]: line for line in map(json.loads, output.text.splitlines())}
    assert sorted(answers) == ["q0", "q1", "q2"]
    for custom_id, line in sorted(answers.items()):
        body = line["response"]["body"]
        assert line["response"]["status_code"] == 200
        print(custom_id, "->", body["choices"][0]["message"]["content"])


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(main(Path(tmp)))
