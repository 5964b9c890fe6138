"""The router watch: a learned route's file replaced on disk is served from the next request; a
corrupt file, or one trained for other models, is refused with a logged error and the route keeps
the router it had."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from levergate.core.service import Service
from levergate.routing.model import RouterFile, load
from tests.unit.layers.test_front import Scripted
from tests.unit.layers.test_route import Keywords, chat, router_file, settings
from tests.waiting import running

HARD = "prove the theorem on this integral"


def serve(path: Path) -> tuple[Service, Scripted, Callable[[], Awaitable[None]]]:
    """The route over `path` (checked every 10 ms) and its watch job's run."""
    from prometheus_client import CollectorRegistry

    from levergate.core.clock import SystemClock
    from levergate.layers.route import Route
    from levergate.layers.shared import Shared

    s = settings({"watch_seconds": 0.01, "routes": [{"name": "auto", "default": "big",
                  "learned": {"file": str(path), "cheap": "mini", "strong": "big"}}]})  # fmt: skip
    models = {m.name: m for m in s.models}
    shared = Shared.build(s, models=models, clock=SystemClock(), registry=CollectorRegistry())
    layer = Route.layer(s.routing, models=models, shared=shared, embedder=Keywords())
    assert layer is not None
    inner = Scripted()
    (job,) = [j for j in shared.jobs if j.name == "router_watch"]
    return layer(inner), inner, job.run


def replace(path: Path, router: RouterFile) -> None:
    """As `levergate router promote` does: write beside, then rename over."""
    beside = path.with_suffix(".tmp")
    router.save(beside)
    beside.replace(path)


async def routed_to(route: Service, inner: Scripted, wanted: str) -> bool:
    for _ in range(200):
        await route(chat(HARD))
        if inner.calls[-1].model == wanted:
            return True
        await asyncio.sleep(0.01)
    return False


async def test_a_replaced_file_is_served_and_a_bad_one_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = router_file(tmp_path)
    route, inner, run = serve(path)
    router, _ = load(path)
    async with running(run):
        await route(chat(HARD))
        assert inner.calls[-1].model == "big"
        # Everything below the threshold: the new file sends the hard prompt to the cheap model.
        replace(path, router.model_copy(update={"threshold": 1e9}))
        assert await routed_to(route, inner, "mini")
        with caplog.at_level(logging.ERROR, logger="levergate.route"):
            path.write_text('{"format": "levergate-router", "version": 1, "models"')
            (tmp_path / "other").mkdir()
            other = router_file(tmp_path / "other", cheap="llama-3-8b")
            for _ in range(100):
                if "not JSON" in caplog.text:
                    break
                await asyncio.sleep(0.01)
            replace(path, load(other)[0])
            for _ in range(100):
                if "llama-3-8b" in caplog.text:
                    break
                await asyncio.sleep(0.01)
        await route(chat(HARD))
        assert inner.calls[-1].model == "mini"  # still the router swapped in before
    assert "refused, the route keeps its router" in caplog.text
    assert "is not a levergate router (not JSON)" in caplog.text
    assert "was trained for cheap model 'llama-3-8b'" in caplog.text
