"""The prompt-cache optimizer end to end, on loopback: the official `openai` SDK through the
proxy to a `kind: anthropic` upstream (the simulator speaking Anthropic Messages, with its
prompt-cache accounting). Breakpoints appear once the reuse of a long system prompt is seen,
the simulator reads them back as `cache_read_input_tokens`, and /metrics shows the expected and
actual cached tokens and the ledger's prompt-cache savings by alias; five client breakpoints
(through the `anthropic` SDK) are a 400 before any upstream call; prefix breakers are listed by
the admin API; `openai_cache_key: on` sends OpenAI's `prompt_cache_key` to an OpenAI upstream.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anthropic
import httpx
import openai
import pytest

from levergate.catalog import Catalog
from levergate.config import Settings
from levergate.gateway import Gateway
from levergate.server.run import serving
from levergate.simulator import SimHandle, SimSettings, run_simulator
from tests.e2e.test_ledger_proxy import sample

KEY = "sk-ant-sim-0123456789"
ADMIN = "admin-token-0123456789"
CLAUDE = "claude-sonnet-4-5"  # priced by the built-in catalog
# About 2,300 tokens at 4 characters a token: over Anthropic's 1,024-token minimum.
SYSTEM = "You answer questions about the travel policy. Cite the section, never guess. " * 120


@pytest.fixture
async def claude_sim() -> AsyncIterator[SimHandle]:
    async with run_simulator(SimSettings(port=0)) as handle:
        yield handle


@asynccontextmanager
async def gateway(sim: SimHandle, **values: Any) -> AsyncIterator[tuple[str, Settings]]:
    """The gateway on a free port, aliases `claude` and `dated` on a kind-anthropic upstream,
    the admin API on; yields its root URL."""
    settings = Settings.load(
        server={"port": 0},
        upstreams=[{"kind": "anthropic", "name": "anthropic", "base_url": sim.root_url,
                    "api_key": KEY}],
        models=[{"name": "claude", "upstream": "anthropic", "upstream_model": CLAUDE},
                {"name": "dated", "upstream": "anthropic", "upstream_model": CLAUDE}],
        cache={"enabled": False},
        admin={"enabled": True, "token": ADMIN},
        prompt_cache={"lint": {"every_seconds": 0}},
        **values,
    )  # fmt: skip
    async with Gateway(settings) as gw, serving(gw) as url:
        yield url.removesuffix("/v1"), settings


def messages_calls(sim: SimHandle) -> int:
    return int(sim.stats()["requests_by_endpoint"].get("/v1/messages", 0))


async def scrape(root: str) -> str:
    async with httpx.AsyncClient() as http:
        return (await http.get(f"{root}/metrics")).text


async def test_breakpoints_follow_reuse_and_the_metrics_show_the_cache_paying(
    claude_sim: SimHandle,
) -> None:
    async with gateway(claude_sim) as (root, settings):
        client = openai.AsyncOpenAI(base_url=f"{root}/v1", api_key="unused", max_retries=0)
        usages = []
        async with client:
            for i in range(4):
                raw = await client.chat.completions.with_raw_response.create(
                    model="claude", max_tokens=8,
                    messages=[{"role": "system", "content": SYSTEM},
                              {"role": "user", "content": f"Question {i}: may I fly business?"}],
                )  # fmt: skip
                usages.append(raw.http_response.json()["usage"])
        metrics = await scrape(root)
    # 1: nothing seen before, no breakpoint (nothing written, nothing read). 2: the system
    # prompt was seen 0 s ago, a 5-minute breakpoint pays: written. 3, 4: read from the cache.
    first, second, *later = usages
    assert first.get("cache_creation_input_tokens", 0) == 0
    assert first["prompt_tokens_details"]["cached_tokens"] == 0
    written = second["cache_creation_input_tokens"]
    assert written >= 1024
    assert second["prompt_tokens_details"]["cached_tokens"] == 0
    assert [u["prompt_tokens_details"]["cached_tokens"] for u in later] == [written, written]
    assert claude_sim.stats()["requests_by_endpoint"]["/v1/messages"] == 4

    read = 2 * written
    prompt = sum(u["prompt_tokens"] for u in usages)
    assert sample(metrics, "levergate_prompt_cache_read_tokens_total", model="claude") == read
    assert sample(metrics, "levergate_prompt_cache_write_tokens_total", model="claude") == written
    assert sample(metrics, "levergate_prompt_cache_prompt_tokens_total", model="claude") == prompt
    # Expected: from the second request on (the system prompt's blocks were sent just before),
    # though the second found no entry yet: it is the one `missed`.
    expected = sample(metrics, "levergate_prompt_cache_expected_tokens_total", model="claude")
    assert expected >= 3 * 1024
    by_outcome = {
        o: sample(metrics, "levergate_prompt_cache_requests_total", model="claude", outcome=o)
        for o in ("hit", "missed", "unexpected_hit", "cold")
    }
    assert by_outcome == {"hit": 2.0, "missed": 1.0, "unexpected_hit": 0.0, "cold": 1.0}
    # The ledger's money, by alias: two reads at (input - read) less one 5-minute write premium.
    rates = Catalog.build(settings).rates("claude", CLAUDE)
    labels = {"lever": "prompt_cache", "model": "claude", "tenant": "default", "feature": ""}
    saved = read * (rates.input - rates.cache_read) / 1e6
    overspent = written * (rates.cache_write - rates.input) / 1e6
    assert sample(metrics, "levergate_savings_usd_total", **labels) == pytest.approx(saved)
    assert sample(metrics, "levergate_overspend_usd_total", **labels) == pytest.approx(overspent)
    assert saved > overspent  # it paid back already


async def test_five_client_breakpoints_are_refused_before_any_upstream_call(
    claude_sim: SimHandle,
) -> None:
    marked: Any = {"type": "ephemeral"}
    system: Any = [{"type": "text", "text": f"Part {i}. {SYSTEM}", "cache_control": marked}
                   for i in range(3)]  # fmt: skip
    content: Any = [{"type": "text", "text": f"Doc {i}.", "cache_control": marked}
                    for i in range(2)]  # fmt: skip
    async with (
        gateway(claude_sim) as (root, _),
        anthropic.AsyncAnthropic(base_url=root, api_key="unused", max_retries=0) as sdk,
    ):
        with pytest.raises(anthropic.BadRequestError) as refused:
            await sdk.messages.create(model="claude", max_tokens=8, system=system,
                                      messages=[{"role": "user", "content": content}])  # fmt: skip
        # Four are allowed: the same request with one fewer goes through.
        fewer: Any = [{"role": "user", "content": content[:1]}]
        answer = await sdk.messages.create(model="claude", max_tokens=8, system=system,
                                           messages=fewer)  # fmt: skip
    assert refused.value.status_code == 400
    assert "at most 4" in refused.value.message
    assert answer.usage.cache_creation_input_tokens
    assert messages_calls(claude_sim) == 1  # only the allowed one reached the provider


async def test_prefix_breakers_are_listed_by_the_admin_api_in_shape_only(
    claude_sim: SimHandle,
) -> None:
    stamps = ("2026-12-01T10:00:01Z", "2026-12-01T10:07:43Z")
    async with gateway(claude_sim) as (root, _):
        client = openai.AsyncOpenAI(base_url=f"{root}/v1", api_key="unused", max_retries=0)
        async with client:
            for at in stamps:
                await client.chat.completions.create(
                    model="dated", max_tokens=4,
                    messages=[{"role": "system", "content": f"Now: {at}. {SYSTEM}"},
                              {"role": "user", "content": "Hi"}],
                )  # fmt: skip
        async with httpx.AsyncClient(base_url=root) as http:
            denied = await http.get("/admin/prompt-cache/findings")
            bad = await http.get(
                "/admin/prompt-cache/findings?limit=0", headers={"authorization": f"Bearer {ADMIN}"}
            )
            found = await http.get(
                "/admin/prompt-cache/findings?model=dated",
                headers={"authorization": f"Bearer {ADMIN}"},
            )
            other = await http.get(
                "/admin/prompt-cache/findings?model=claude",
                headers={"authorization": f"Bearer {ADMIN}"},
            )
        metrics = await scrape(root)
    assert denied.status_code == 401
    assert bad.status_code == 400
    assert bad.json()["error"]["param"] == "limit"
    assert other.json()["data"] == []
    [finding] = found.json()["data"]
    assert finding["model"] == "dated"
    assert finding["shared_after"] >= 2048
    assert finding["position"] > 0
    assert "10:07" not in found.text  # no prompt text
    assert "travel policy" not in found.text
    kind = finding["kind"]
    assert sample(metrics, "levergate_prefix_breaks_total", model="dated", kind=kind) == 1.0


async def test_openai_cache_key_on_reaches_an_openai_upstream(sim: SimHandle) -> None:
    async def send(tenants: tuple[str, ...], **values: Any) -> None:
        settings = Settings.load(
            server={"port": 0}, upstreams=[{"name": "sim", "base_url": sim.base_url}],
            models=[{"name": "m", "upstream": "sim"}], cache={"enabled": False}, **values,
        )  # fmt: skip
        async with Gateway(settings) as gw, serving(gw) as url:
            client = openai.AsyncOpenAI(base_url=url, api_key="unused", max_retries=0)
            async with client:
                for tenant in tenants:
                    await client.chat.completions.create(
                        model="m", max_tokens=4, extra_headers={"x-levergate-tenant": tenant},
                        messages=[{"role": "system", "content": SYSTEM},
                                  {"role": "user", "content": "Hi"}],
                    )  # fmt: skip

    # `auto` leaves a non-OpenAI host alone (another provider may reject the field).
    await send(("a",))
    assert sim.stats()["prompt_cache_keys"] == {"requests": 0, "distinct": 0}
    await send(("a", "a", "b"), prompt_cache={"openai_cache_key": "on"})
    # One key per tenant and prefix: tenant a's two requests share one, b gets its own.
    assert sim.stats()["prompt_cache_keys"] == {"requests": 3, "distinct": 2}
