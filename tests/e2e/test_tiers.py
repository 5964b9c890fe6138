"""Service tiers end to end (issue 26): `levergate serve` as a real process, the simulator (in
this process, on loopback) selling gpt-5-mini at flex and priority and gpt-4o-mini at neither,
the official OpenAI SDK as the client.

- An explicit `service_tier` goes through as asked, the answer's tier prices it (the cost
  header, /metrics' `tier` lever); a tier the model is not priced at, or a name that is no
  tier, is a 400 that says why.
- The deadline picks: an hour to spare goes flex, seconds go standard, a tight interactive
  deadline pays for priority; a flex refusal (429 "resource unavailable") is re-decided in time.
- A bad deadline is a 400.
"""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from levergate.catalog import Catalog
from levergate.policies.pricing import Tokens, cost
from levergate.policies.tiers import Tier
from levergate.simulator import SimHandle, SimSettings, run_simulator
from levergate.testing.ports import free_port
from tests.e2e.test_cli import LEVERGATE, wait_for
from tests.e2e.test_ledger_proxy import sample
from tests.e2e.test_ops_cli import environment

HELLO: list[Any] = [{"role": "user", "content": "Say something simulated."}]
CONFIG = """\
upstreams: [{{name: sim, base_url: '{sim}', api_key: sk-sim}}]
models:
  - {{name: mini, upstream: sim, upstream_model: gpt-5-mini}}
  - {{name: old, upstream: sim, upstream_model: gpt-4o-mini}}
traffic: {{retry: {{enabled: false}}}}
tiers:
  enabled: true
  refusal_cooldown_seconds: 600
  routes: {{mini: {{ceiling: priority}}}}
"""


@pytest.fixture
async def sim() -> AsyncIterator[SimHandle]:
    async with run_simulator(SimSettings(port=0)) as handle:
        yield handle


@pytest.fixture
def gateway(
    sim: SimHandle, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> str:  # fmt: skip
    config = tmp_path / "levergate.yaml"
    config.write_text(CONFIG.format(sim=sim.base_url))
    port = free_port()
    proc = subprocess.Popen(
        [*LEVERGATE, "serve", "--config", str(config), "--port", str(port)],
        env=environment(), cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    processes.append(proc)
    wait_for(port, proc)
    return f"http://127.0.0.1:{port}"


async def ask(
    url: str, model: str = "mini", *, headers: dict[str, str] | None = None, **body: Any
) -> tuple[Any, Any]:  # fmt: skip
    async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0) as sdk:
        raw = await sdk.chat.completions.with_raw_response.create(
            model=model, messages=HELLO, max_tokens=4, extra_headers=headers or {},
            extra_body=body or None,
        )  # fmt: skip
        return raw.parse(), raw.headers


def flex_cost(answer: Any) -> float:
    rates = Catalog.builtin().tier_rates("gpt-5-mini", Tier.FLEX, "gpt-5-mini")
    assert rates is not None
    usage = answer.usage
    return cost(Tokens(usage.prompt_tokens, 0, 0, usage.completion_tokens), rates)


async def test_an_explicit_tier_is_sent_priced_by_the_answer_and_bad_input_refused(
    gateway: str,
) -> None:
    answer, headers = await ask(gateway, service_tier="flex")
    assert answer.service_tier == "flex"
    assert headers["x-levergate-tier"] == "flex"
    assert float(headers["x-levergate-cost-usd"]) == pytest.approx(flex_cost(answer), rel=1e-6)
    with pytest.raises(openai.BadRequestError) as unsold:
        await ask(gateway, "old", service_tier="flex")
    assert unsold.value.code == "unsupported_service_tier"
    assert "'flex'" in unsold.value.message
    assert "'old'" in unsold.value.message
    with pytest.raises(openai.BadRequestError) as unknown:
        await ask(gateway, service_tier="turbo")
    assert "'auto', 'default', 'flex', 'priority', 'fast', 'scale'" in unknown.value.message
    async with httpx.AsyncClient() as http:
        metrics = (await http.get(f"{gateway}/metrics")).text
    saved = sample(metrics, "levergate_savings_usd_total", lever="tier", model="mini",
                   tenant="default", feature="")  # fmt: skip
    assert saved == pytest.approx(flex_cost(answer), rel=1e-6)  # flex is half of standard
    for value in ("0", "-3", "soon", "nan"):
        with pytest.raises(openai.BadRequestError) as caught:
            await ask(gateway, headers={"x-levergate-timeout": value})
        assert caught.value.param == "x-levergate-timeout", value


async def test_the_deadline_picks_the_tier_and_a_refusal_is_re_decided(
    gateway: str, sim: SimHandle
) -> None:
    relaxed, headers = await ask(gateway, headers={"x-levergate-timeout": "3600"})
    assert (relaxed.service_tier, headers["x-levergate-tier"]) == ("flex", "flex")
    soon, headers = await ask(gateway, headers={"x-levergate-timeout": "20"})
    assert (soon.service_tier, headers["x-levergate-tier"]) == ("default", "standard")
    urgent = {"x-levergate-timeout": "1.5", "x-levergate-priority": "interactive"}
    rushed, headers = await ask(gateway, headers=urgent)
    assert (rushed.service_tier, headers["x-levergate-tier"]) == ("priority", "priority")
    unpriced, headers = await ask(gateway, "old", headers={"x-levergate-timeout": "3600"})
    assert unpriced.service_tier == "default"  # gpt-4o-mini is sold at no flex price
    # A flex refusal is re-decided within the deadline.
    sim.configure({"tiers": {"flex": {"max_concurrency": 0}}})  # every flex request refused
    answer, headers = await ask(gateway, headers={"x-levergate-timeout": "300"})
    assert (answer.service_tier, headers["x-levergate-tier"]) == ("default", "standard")
    assert sim.stats()["tiers"]["flex"]["refused"] == 1
    again, _ = await ask(gateway, headers={"x-levergate-timeout": "300"})
    assert again.service_tier == "default"  # flex cools down for every request of the model
    assert sim.stats()["tiers"]["flex"]["refused"] == 1
