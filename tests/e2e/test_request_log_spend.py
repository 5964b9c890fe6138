"""The request log's spend equals the ledger's `/metrics` to the cent (issue 23 §1): a mixed
workload through real loopback servers — the official OpenAI and Anthropic SDKs as clients, the
gateway in front of the simulator speaking OpenAI (prompt-cache reads inside prompt_tokens,
reasoning tokens inside completion_tokens) and Anthropic Messages (cache writes and reads
outside input_tokens), exact-cache hits, streams and a refused request — then the log's totals
(`GET /admin/log/summary`) against the sums of `/metrics`' counters, by tenant and by lever."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from levergate.app import build_gateway
from levergate.catalog import Catalog
from levergate.config import Settings
from levergate.server.run import serving
from levergate.simulator import SimHandle, SimSettings, run_simulator

ADMIN = "admin-token-0123456789"
GPT, CLAUDE = "gpt-4o-mini", "claude-sonnet-4-5"
SYSTEM = "You answer questions about the travel policy. Cite the section, never guess. " * 120


@pytest.fixture
async def sim() -> AsyncIterator[SimHandle]:
    async with run_simulator(SimSettings(port=0, reasoning_share=0.25)) as handle:
        yield handle


def settings(sim: SimHandle, tmp_path: Path) -> Settings:
    return Settings.load(
        server={"port": 0},
        upstreams=[{"name": "openai", "base_url": sim.base_url},
                   {"kind": "anthropic", "name": "anthropic", "base_url": sim.root_url,
                    "api_key": "sk-ant-sim-0123456789"}],
        models=[{"name": GPT, "upstream": "openai"},
                {"name": "claude", "upstream": "anthropic", "upstream_model": CLAUDE}],
        admin={"enabled": True, "token": ADMIN},
        prompt_cache={"lint": {"every_seconds": 0}},
        request_log={"enabled": True, "flush_seconds": 0.05,
                     "store": {"sqlite_path": str(tmp_path / "requests.sqlite3")}},
    )  # fmt: skip


async def polled(condition: Callable[[], Awaitable[bool]], *, tries: int = 400) -> None:
    """Until `condition` holds (the log's writer flushes every 50 ms here), a bounded number of
    tries."""
    for _ in range(tries):
        if await condition():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the condition never held")


def by_labels(metrics: str, name: str, *keys: str) -> dict[tuple[str, ...], float]:
    """A counter's samples summed by the values of `keys`."""
    found: dict[tuple[str, ...], float] = defaultdict(float)
    for family in text_string_to_metric_families(metrics):
        for s in family.samples:
            if s.name == name:
                found[tuple(s.labels.get(k, "") for k in keys)] += s.value
    return found


async def openai_traffic(url: str) -> list[dict[str, Any]]:
    """Prompt-cache reads (the long system prompt again), an exact hit (the first question
    again, temperature 0), a stream, an unknown model (a 404, spent nothing)."""
    usages = []
    async with openai.AsyncOpenAI(base_url=url, api_key="unused", max_retries=0) as client:
        for tenant, question in (("acme", "May I fly business?"), ("acme", "Taxis?"),
                                 ("beta", "Hotels?"), ("acme", "May I fly business?")):  # fmt: skip
            raw = await client.chat.completions.with_raw_response.create(
                model=GPT, max_tokens=16, temperature=0,
                extra_headers={"x-levergate-tenant": tenant, "x-levergate-feature": "policy"},
                messages=[{"role": "system", "content": SYSTEM},
                          {"role": "user", "content": question}],
            )  # fmt: skip
            usages.append(raw.http_response.json()["usage"])
        stream = await client.chat.completions.create(
            model=GPT, max_tokens=12, stream=True, stream_options={"include_usage": True},
            messages=[{"role": "user", "content": "Stream it."}],
            extra_headers={"x-levergate-tenant": "beta"},
        )  # fmt: skip
        async for _ in stream:
            pass
        with pytest.raises(openai.NotFoundError):
            await client.chat.completions.create(model="nope", messages=[
                {"role": "user", "content": "?"}])  # fmt: skip
        # Anthropic upstream through the OpenAI shape: breakpoints written, then read.
        for i in range(3):
            await client.chat.completions.create(
                model="claude", max_tokens=8, extra_headers={"x-levergate-tenant": "beta"},
                messages=[{"role": "system", "content": SYSTEM},
                          {"role": "user", "content": f"Question {i}: receipts?"}],
            )  # fmt: skip
    return usages


async def anthropic_traffic(root: str) -> None:
    """The Anthropic SDK against /v1/messages, whole and streamed, its own cache_control."""
    system: Any = [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}]
    async with anthropic.AsyncAnthropic(base_url=root, api_key="unused", max_retries=0) as sdk:
        await sdk.messages.create(model="claude", max_tokens=8, system=system,
                                  messages=[{"role": "user", "content": "Meals?"}])  # fmt: skip
        async with sdk.messages.stream(
            model="claude", max_tokens=8, system=system,
            messages=[{"role": "user", "content": "Per diem?"}],
        ) as s:  # fmt: skip
            async for _ in s:
                pass


async def test_the_logs_spend_and_savings_equal_the_ledgers_metrics_to_the_cent(
    sim: SimHandle, tmp_path: Path
) -> None:
    config = settings(sim, tmp_path)
    headers = {"authorization": f"Bearer {ADMIN}"}
    async with build_gateway(config) as gw, serving(gw) as url:
        root = url.removesuffix("/v1")
        usages = await openai_traffic(url)
        await anthropic_traffic(root)
        sent = 4 + 1 + 1 + 3 + 2
        async with httpx.AsyncClient(base_url=root, headers=headers) as http:

            async def logged() -> bool:
                summary = (await http.get("/admin/log/summary")).json()
                return bool(summary["requests"] == sent)

            await polled(logged)
            summary = (await http.get("/admin/log/summary")).json()
            tenants = {t: (await http.get("/admin/log/summary", params={"tenant": t})).json()
                       for t in ("acme", "beta")}  # fmt: skip
            metrics = (await http.get("/metrics")).text

    # The workload did what it says: reasoning and prompt-cache reads (OpenAI), cache writes
    # and reads (Anthropic), an exact hit, a refusal.
    assert all(u["completion_tokens_details"]["reasoning_tokens"] > 0 for u in usages[:3])
    assert summary["cached_tokens"] > 0
    assert summary["cache_write_tokens"] > 0
    assert summary["savings"]["exact"] > 0
    assert summary["errors"] == 1
    # Reasoning tokens are inside completion_tokens: priced once, as output.
    rates = Catalog.build(config).rates(GPT)
    first = usages[0]
    cached = first["prompt_tokens_details"]["cached_tokens"]
    miss = ((first["prompt_tokens"] - cached) * rates.input + cached * rates.cache_read
            + first["completion_tokens"] * rates.output) / 1e6  # fmt: skip
    assert summary["savings"]["exact"] == pytest.approx(miss, rel=1e-9)

    cost = sum(by_labels(metrics, "levergate_cost_usd_total", "model").values())
    assert cost > 0.01  # enough money that "to the cent" says something
    assert round(summary["cost_usd"], 2) == round(cost, 2)
    assert summary["cost_usd"] == pytest.approx(cost, rel=1e-9)
    spend = by_labels(metrics, "levergate_spend_usd_total", "tenant", "kind")
    for tenant, found in tenants.items():
        paid = sum(v for (t, kind), v in spend.items() if t == tenant and kind != "shadow")
        assert found["cost_usd"] == pytest.approx(paid, rel=1e-9)
    saved = by_labels(metrics, "levergate_savings_usd_total", "lever")
    over = by_labels(metrics, "levergate_overspend_usd_total", "lever")
    for lever, value in summary["savings"].items():
        net = saved.get((lever,), 0.0) - over.get((lever,), 0.0)
        assert value == pytest.approx(net, rel=1e-9, abs=1e-12), lever
    assert summary["saved_usd"] == pytest.approx(sum(summary["savings"].values()), rel=1e-9)
