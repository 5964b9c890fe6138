"""`Req` values and plans for the analyzer's tests."""

from __future__ import annotations

from typing import Any

from levergate.analyze.inputs import Req
from levergate.analyze.plan import Plan, plan_of
from levergate.config import Settings

BASE = Req(
    arrival=0.0, tenant="t", feature="", model="gpt-4o-mini", alias="gpt-4o-mini", upstream="",
    fp="fp0", det=True, n=1, blocks=(), block_tokens=0.0, prompt=1000, cached=0, written=0,
    output=100, ttft=None, total=1.0, not_after=None, defer=False, hit=False, body=False,
)  # fmt: skip


def req(**changes: Any) -> Req:
    return BASE._replace(**changes)


def plan(**settings: Any) -> Plan:
    return plan_of(Settings.load(**settings))


def endpoints(strategy: str | None = None, count: int = 2) -> dict[str, Any]:
    """Settings for `gpt-4o-mini` over `count` endpoints (`balance: strategy`)."""
    ups = [{"name": f"e{i}", "base_url": f"http://127.0.0.1:{9000 + i}/v1"} for i in range(count)]
    model: dict[str, Any] = {"name": "gpt-4o-mini",
                             "endpoints": [{"upstream": u["name"]} for u in ups]}  # fmt: skip
    if strategy:
        model["balance"] = strategy
    return {"upstreams": ups, "models": [model]}
