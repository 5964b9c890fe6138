"""The simulator's provider batch APIs through the official SDKs (the wire shapes they parse):
OpenAI files + batches (output file lines), Anthropic Message Batches (results JSONL), and a
turnaround on the simulator's clock."""

from __future__ import annotations

import anthropic
import openai
import orjson
from anthropic.types.message_create_params import MessageCreateParamsNonStreaming

from levergate.simulator import SimSettings, run_simulator
from levergate.simulator.settings import BatchApiSettings
from levergate.testing import ManualClock


def openai_line(custom_id: str) -> bytes:
    body = {"model": "gpt-4o-mini", "max_tokens": 3,
            "messages": [{"role": "user", "content": custom_id}]}  # fmt: skip
    line = {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": body}
    return orjson.dumps(line) + b"\n"


async def test_openai_batches_end_after_the_turnaround_on_the_simulators_clock() -> None:
    clock = ManualClock(start=1000.0)
    settings = SimSettings(port=0, batch_api=BatchApiSettings(turnaround_seconds=60))
    async with (
        run_simulator(settings, clock=clock) as sim,
        openai.AsyncOpenAI(base_url=sim.base_url, api_key="sk-sim", max_retries=0) as client,
    ):
        data = b"".join(openai_line(f"c{i}") for i in range(3))
        uploaded = await client.files.create(file=("in.jsonl", data), purpose="batch")
        assert uploaded.bytes == len(data)
        batch = await client.batches.create(
            input_file_id=uploaded.id,
            endpoint="/v1/chat/completions",
            completion_window="24h",
            metadata={"k": "v"},
        )
        assert batch.status == "in_progress"
        clock.advance(59)
        assert (await client.batches.retrieve(batch.id)).status == "in_progress"
        clock.advance(1)
        done = await client.batches.retrieve(batch.id)
        assert done.status == "completed"
        assert done.metadata == {"k": "v"}
        assert done.request_counts is not None
        assert (done.request_counts.total, done.request_counts.completed) == (3, 3)
        assert done.output_file_id is not None
        content = await client.files.content(done.output_file_id)
        lines = [orjson.loads(raw) for raw in content.content.splitlines()]
        assert [item["custom_id"] for item in lines] == ["c0", "c1", "c2"]
        assert all(item["response"]["body"]["usage"]["completion_tokens"] == 3 for item in lines)
        listed = await client.batches.list()
        assert [b.id for b in listed.data] == [batch.id]
        stats = sim.simulator.snapshot()
    assert stats["batch_api"]["batches_created"] == 1
    assert "/v1/chat/completions" not in stats["requests_by_endpoint"]


async def test_anthropic_message_batches_results_parse_in_the_sdk() -> None:
    async with (
        run_simulator(SimSettings(port=0)) as sim,
        anthropic.AsyncAnthropic(
            base_url=sim.root_url, api_key="sk-ant-sim", max_retries=0
        ) as client,
    ):

        def params(tokens: int) -> MessageCreateParamsNonStreaming:
            return {"model": "claude-3-5-haiku", "max_tokens": tokens,
                    "messages": [{"role": "user", "content": "hi"}]}  # fmt: skip

        made = await client.messages.batches.create(
            requests=[{"custom_id": "a", "params": params(4)},
                      {"custom_id": "b", "params": params(2)}])  # fmt: skip
        done = await client.messages.batches.retrieve(made.id)
        assert done.processing_status == "ended"
        assert done.request_counts.succeeded == 2
        results = {
            r.custom_id: r.result async for r in await client.messages.batches.results(made.id)
        }
    assert set(results) == {"a", "b"}
    for custom_id, tokens in (("a", 4), ("b", 2)):
        result = results[custom_id]
        assert result.type == "succeeded"
        assert result.message.usage.output_tokens == tokens
