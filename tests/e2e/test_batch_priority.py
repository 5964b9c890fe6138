"""Interactive traffic keeps precedence over a running batch: with the upstream's capacity
taken (one request at a time) and the batch's lines queued for it in the Limits layer, an
interactive request goes before the batch lines already waiting, not behind them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import openai
import pytest

from levergate.simulator import LatencySettings, SimHandle, SimSettings, run_simulator
from tests.e2e.conftest import USER, GatewayFactory
from tests.e2e.test_batch_api import batch_settings, jsonl, line, sdk

LINES, CONCURRENCY = 40, 16


@pytest.fixture
async def slow_sim() -> AsyncIterator[SimHandle]:
    async with run_simulator(SimSettings(port=0, latency=LatencySettings(ttft_ms=80.0))) as sim:
        yield sim


async def completed(client: openai.AsyncOpenAI, batch_id: str) -> int:
    counts = (await client.batches.retrieve(batch_id)).request_counts
    assert counts is not None
    return counts.completed


async def test_an_interactive_request_overtakes_the_queued_batch_lines(
    slow_sim: SimHandle, gateway_for: GatewayFactory, tmp_path: Path
) -> None:
    upstream = {"name": "sim", "base_url": slow_sim.base_url, "limits": {"max_concurrency": 1}}
    async with (
        gateway_for(
            upstreams=[upstream],
            models=[{"name": "*", "upstream": "sim"}],
            batch=batch_settings(tmp_path, concurrency=CONCURRENCY),
        ) as url,
        sdk(url) as client,
    ):
        lines = [line(f"b-{i}", max_tokens=2) for i in range(LINES)]
        uploaded = await client.files.create(file=("in.jsonl", jsonl(lines)), purpose="batch")
        batch = await client.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        while await completed(client, batch.id) < 2:  # running: its lines queue for the slot
            await asyncio.sleep(0.02)
        before = await completed(client, batch.id)
        reply = await client.chat.completions.create(
            model="m", messages=USER, max_tokens=2,
            extra_headers={"x-levergate-priority": "interactive"},
        )  # fmt: skip
        after = await completed(client, batch.id)
        assert reply.choices[0].message.content
    # At most the line holding the slot (and one finishing as we looked) went before it; the
    # other ~15 queued lines waited for it.
    assert after - before <= 2, (before, after)
    assert after < LINES - CONCURRENCY // 2
