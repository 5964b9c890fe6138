"""A route with its quality measured live: `model="support"` sends FAQ questions to a cheaper
alias and everything else to the strong default; every cheap answer is asked again of the
default off the request path (shadow sampling), and the two are compared. The share of the
default's quality the route keeps is a Prometheus gauge, `levergate_route_quality_retention`.

    python examples/route_with_shadow_retention.py

Runs against the simulator, started here. Its words are a function of the prompt and the model,
so two routes show both ends: `support` sends FAQs to a different, smaller model (every sample
disagrees with the default), `mirror` sends them to the default model at a cheaper deployment
(every sample agrees). With a real model pair the gauge lands in between; sample a share of
the traffic (`rate: 0.05`) rather than all of it, since each sample is a paid call.
"""

from __future__ import annotations

import asyncio

from prometheus_client.parser import text_string_to_metric_families

from levergate import Gateway, Settings
from levergate.simulator import SimSettings, run_simulator

FAQ = [f"How do I reset password number {n}?" for n in range(4)]
OTHER = [f"Please look into invoice {n}." for n in range(4)]


def routes() -> dict[str, object]:
    def faq_to(alias: str) -> list[dict[str, object]]:
        return [{"name": "faq", "to": alias, "when": {"feature": ["faq"]}}]

    return {
        "shadow": {"rate": 1.0},  # every cheap answer sampled: this is a demonstration
        "routes": [
            {"name": "support", "default": "large", "rules": faq_to("small")},
            {"name": "mirror", "default": "large", "rules": faq_to("large-batch")},
        ],
    }


async def gauges(gw: Gateway) -> dict[tuple[str, str, str], float]:
    """`(metric, route, result)` → value, from the gateway's own /metrics text."""
    text = (await gw.metrics()).decode()
    return {
        (s.name, s.labels.get("route", ""), s.labels.get("result", "")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def main() -> None:
    async with run_simulator(SimSettings(port=0)) as sim:
        settings = Settings.load(
            upstreams=[{"name": "sim", "base_url": sim.base_url}],
            models=[
                {"name": "small", "upstream": "sim", "upstream_model": "sim-small"},
                {"name": "large", "upstream": "sim", "upstream_model": "sim-large"},
                {"name": "large-batch", "upstream": "sim", "upstream_model": "sim-large"},
            ],
            routing=routes(),
        )
        async with Gateway(settings) as gw:
            for route in ("support", "mirror"):
                await gw.map(FAQ, model=route, feature="faq", max_tokens=8)
                await gw.map(OTHER, model=route, feature="billing", max_tokens=8)
            for _ in range(500):  # the samples run off the request path: wait for all eight
                found = await gauges(gw)
                compared = sum(
                    found.get(("levergate_route_shadow_total", route, result), 0.0)
                    for route in ("support", "mirror") for result in ("agree", "disagree")
                )  # fmt: skip
                if compared == 2 * len(FAQ):
                    break
                await asyncio.sleep(0.02)
    retention = {
        route: found[("levergate_route_quality_retention", route, "")]
        for route in ("support", "mirror")
    }
    # support: half its answers came from `small`, and every sampled one disagreed: 1 - 0.5 x 1.
    assert retention == {"support": 0.5, "mirror": 1.0}, retention
    print(f"quality retention measured live: support {retention['support']:.0%} "
          f"(FAQs to a smaller model), mirror {retention['mirror']:.0%} "
          f"(FAQs to a cheaper deployment of the same model)")  # fmt: skip


if __name__ == "__main__":
    asyncio.run(main())
