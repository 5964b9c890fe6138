"""Deferral to provider batch APIs end to end: the official SDKs through a real gateway on
loopback, the simulator as the provider with its OpenAI batch API and Anthropic Message
Batches. A deferred batch reaches the provider as ONE provider batch (the simulator's stats
show it, and no chat calls), comes back with every line answered, and /metrics shows the
provider's batch discount as the `batch` lever's savings."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from levergate.catalog import Catalog
from levergate.config import Settings
from levergate.simulator import SimHandle
from tests.e2e.conftest import GatewayFactory
from tests.e2e.test_batch_api import batch_settings, finished, jsonl, lines_of
from tests.e2e.test_ledger_proxy import sample

MODEL = "gpt-4o-mini"
CLAUDE = "claude-haiku"


def defer_settings(sim: SimHandle, tmp: Path, **over: Any) -> dict[str, Any]:
    return {
        "upstreams": [
            {"name": "sim", "base_url": sim.base_url, "api_key": "sk-sim-openai"},
            {"name": "ant", "kind": "anthropic", "base_url": sim.root_url,
             "api_key": "sk-ant-simulated"},
        ],
        "models": [{"name": MODEL, "upstream": "sim"},
                   {"name": CLAUDE, "upstream": "ant", "upstream_model": "claude-3-5-haiku",
                    "price": {"input": 0.8, "output": 4.0, "batch_discount": 0.5}}],
        "batch": batch_settings(tmp),
        "defer": {"enabled": True, "routes": {MODEL: {}, CLAUDE: {}},
                  "poll_first_seconds": 0.05, "poll_max_seconds": 0.2,
                  "pack_max_wait_seconds": 0},
        **over,
    }  # fmt: skip


def line(custom_id: str, model: str = MODEL) -> dict[str, Any]:
    body = {"model": model, "max_tokens": 3,
            "messages": [{"role": "user", "content": f"Question {custom_id}?"}]}  # fmt: skip
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": body}


@pytest.fixture
async def gateway(
    sim: SimHandle, gateway_for: GatewayFactory, tmp_path: Path
) -> AsyncIterator[str]:
    async with gateway_for(**defer_settings(sim, tmp_path)) as url:
        yield url


def sdk(url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=url, api_key="x", max_retries=0,
                              default_headers={"x-levergate-tenant": "acme"})  # fmt: skip


async def stats(sim: SimHandle) -> dict[str, Any]:
    async with httpx.AsyncClient() as http:
        return (await http.get(f"{sim.root_url}/sim/stats")).json()  # type: ignore[no-any-return]


async def run_batch(url: str, lines: list[dict[str, Any]]) -> tuple[Any, list[dict[str, Any]]]:
    async with sdk(url) as client:
        uploaded = await client.files.create(file=("in.jsonl", jsonl(lines)), purpose="batch")
        batch = await client.batches.create(input_file_id=uploaded.id,
                                            endpoint="/v1/chat/completions",
                                            completion_window="24h")  # fmt: skip
        done = await finished(client, batch.id)
        return done, await lines_of(client, done.output_file_id)


async def test_a_deferred_batch_is_one_provider_batch_and_saves_the_discount(
    sim: SimHandle, gateway: str
) -> None:
    lines = [line(f"q{i}") for i in range(20)]
    done, output = await run_batch(gateway, lines)
    assert done.status == "completed"
    assert done.request_counts is not None
    assert (done.request_counts.completed, done.request_counts.failed) == (20, 0)
    assert sorted(o["custom_id"] for o in output) == sorted(f"q{i}" for i in range(20))
    for item in output:
        assert item["response"]["status_code"] == 200
        assert item["response"]["body"]["usage"]["completion_tokens"] == 3
    seen = await stats(sim)
    assert seen["batch_api"]["batches_created"] == 1
    assert seen["batch_api"]["lines_answered"] == 20
    assert "/v1/chat/completions" not in seen["requests_by_endpoint"]
    assert seen["requests_by_key"] == {"sk-...enai": 20}  # the provider batch's key, per line
    async with httpx.AsyncClient() as http:
        metrics = (await http.get(gateway.removesuffix("/v1") + "/metrics")).text
    labels = {"model": MODEL, "tenant": "acme", "feature": ""}
    saved = sample(metrics, "levergate_savings_usd_total", lever="batch", **labels)
    spent = sample(metrics, "levergate_spend_usd_total", kind="answer", **labels)
    prompt = sum(o["response"]["body"]["usage"]["prompt_tokens"] for o in output)
    rates = Catalog.build(Settings.load(**defer_settings_stub())).rates(MODEL)
    full = (prompt * rates.input + 60 * rates.output) / 1e6
    assert saved == pytest.approx(full / 2, rel=1e-6)
    assert spent == pytest.approx(full / 2, rel=1e-6)


def defer_settings_stub() -> dict[str, Any]:
    return {"upstreams": [{"name": "sim", "base_url": "http://127.0.0.1:1/v1"}],
            "models": [{"name": MODEL, "upstream": "sim"}]}  # fmt: skip


async def test_an_anthropic_upstream_defers_through_message_batches(
    sim: SimHandle, gateway: str
) -> None:
    done, output = await run_batch(gateway, [line(f"c{i}", CLAUDE) for i in range(5)])
    assert done.status == "completed"
    assert sorted(o["custom_id"] for o in output) == [f"c{i}" for i in range(5)]
    for item in output:
        body = item["response"]["body"]
        assert body["object"] == "chat.completion"
        assert body["usage"]["completion_tokens"] == 3
    seen = await stats(sim)
    assert seen["batch_api"]["batches_created"] == 1
    assert seen["requests_by_endpoint"].get("/v1/messages/batches", 0) >= 2
    assert "/v1/messages" not in seen["requests_by_endpoint"]


async def test_a_batch_with_a_line_that_cannot_be_deferred_runs_the_ordinary_way(
    sim: SimHandle, gateway_for: GatewayFactory, tmp_path: Path
) -> None:
    settings = defer_settings(sim, tmp_path)
    settings["defer"]["routes"] = {MODEL: {}}  # CLAUDE has no route policy now
    async with gateway_for(**settings) as url:
        done, output = await run_batch(url, [line("a"), line("b", CLAUDE)])
    assert done.status == "completed"
    assert len(output) == 2
    seen = await stats(sim)
    assert seen["batch_api"]["batches_created"] == 0
    assert seen["requests_by_endpoint"]["/v1/chat/completions"] == 1
    assert seen["requests_by_endpoint"]["/v1/messages"] == 1
    assert not list((tmp_path / "files" / "defer").glob("*"))  # no provider file left behind
