"""`levergate report --url`'s quality gauges from a gateway with auth on: `/metrics` needs the
metrics token, so without it the report says why it has none, and with it the route's live
retention (its shadow samples) is read."""

from __future__ import annotations

import asyncio

import pytest

from levergate.cli.report import _gauges
from tests.e2e.shadow_rig import ask, gateway_settings, proxy, simulators

TOKEN = "mt-report-0123456789"  # noqa: S105 (a test credential)


async def test_the_report_reads_quality_gauges_with_the_metrics_token(
    capsys: pytest.CaptureFixture[str],
) -> None:
    async with simulators() as (good, hung):
        settings = gateway_settings(
            good, hung,
            auth={"enabled": True, "keys": [{"key": "x", "tenant": "acme"}]},
            metrics={"token": TOKEN},
            routing={"shadow": {"rate": 1.0}, "routes": [
                {"name": "auto", "default": "large",
                 "rules": [{"name": "faq", "to": "small", "when": {"feature": ["faq"]}}]}]},
        )  # fmt: skip
        async with proxy(settings) as (sdk, metrics_url):
            await sdk.chat.completions.create(model="auto", messages=ask("What is 2 plus 2?"))
            url = metrics_url.removesuffix("/metrics")
            assert await asyncio.to_thread(_gauges, url, None) == {}
            assert "answered 401 (--metrics-token): no quality gauges" in capsys.readouterr().err
            for _ in range(200):  # until the shadow sample has been compared
                found = await asyncio.to_thread(_gauges, url, TOKEN)
                if "levergate_route_quality_retention{route=auto}" in found:
                    break
                await asyncio.sleep(0.025)
            assert found["levergate_route_quality_retention{route=auto}"] == 0.0  # disagreed
            assert await asyncio.to_thread(_gauges, url, "wrong") == {}
