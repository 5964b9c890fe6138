"""A challenger router on live traffic (layers/route_shadow.py `challenge`): put beside a learned
route's file by `levergate router challenge`, picked up by the router watch, it decides a share
of the route's learned decisions off the path; what either router sends cheap is compared with
the strong answer, each comparison a label of layer `challenger` carrying both decisions and the
candidate's digest, and `routing.promote.live` reads the two retentions from them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from levergate.core.clock import SystemClock
from levergate.core.service import Service
from levergate.layers.measure.shadow_labels import ShadowLabel
from levergate.layers.route import Route
from levergate.layers.route_paths import challenger_path
from levergate.layers.route_watch import RouterWatch
from levergate.layers.shared import Shared
from levergate.routing.model import load
from levergate.routing.promote import live
from tests.unit.layers.test_route import Keywords, chat, router_file, settings
from tests.unit.layers.test_route_shadow import Scripted
from tests.waiting import running, until

EASY, HARD = "thanks a lot", "prove the theorem on this integral"


def challenger(route_file: Path, *, threshold: float, digest: str = "c0ffee", **more: Any) -> None:
    """The route's own router with another threshold (1e9: everything cheap; -1e9: everything
    strong), as `levergate router challenge` puts it: beside, renamed over."""
    router, _ = load(route_file)
    marked = router.model_copy(update={"threshold": threshold, "training": {
        "challenge": {"share": 1.0, "sha256": digest}}, **more})  # fmt: skip
    beside = route_file.with_name("beside.tmp")
    marked.save(beside)
    beside.replace(challenger_path(str(route_file)))


def built(path: Path) -> tuple[Service, Scripted, Shared, RouterWatch, list[ShadowLabel]]:
    s = settings({"routes": [{"name": "auto", "default": "big", "learned": {
        "file": str(path), "cheap": "mini", "strong": "big"}}]})  # fmt: skip
    models = {m.name: m for m in s.models}
    shared = Shared.build(s, models=models, clock=SystemClock(), registry=CollectorRegistry())
    heard: list[ShadowLabel] = []
    shared.shadow_labels.listen(heard.append)
    layer = Route.layer(s.routing, models=models, shared=shared, embedder=Keywords())
    assert layer is not None
    inner = Scripted({("mini", EASY): "ok", ("big", EASY): "ok", ("mini", HARD): "7",
                      ("big", HARD): "42"})  # fmt: skip
    (watch,) = [j.run.__self__ for j in shared.jobs if j.name == "router_watch"]  # type: ignore[attr-defined]
    assert isinstance(watch, RouterWatch)
    return layer(inner), inner, shared, watch, heard


async def test_the_challenger_decides_beside_the_champion_and_is_labelled_apart(
    tmp_path: Path,
) -> None:
    path = router_file(tmp_path)
    challenger(path, threshold=1e9)  # the challenger sends everything cheap
    route, inner, shared, watch, heard = built(path)
    (job,) = [j for j in shared.jobs if j.name == "route_shadow"]
    async with running(job.run):
        for text in (EASY, HARD):
            await route(chat(text))
        await until(lambda: len(heard) == 2)
        assert [c.model for c in inner.calls[:2]] == ["mini", "big"]  # the champion served
        assert sorted(c.model for c in inner.calls[2:]) == ["big", "mini"]  # asked off the path
        found = {label.prompt: label for label in heard}
        details = {p: json.loads(label.detail or "{}") for p, label in found.items()}
        assert (found[EASY].layer, found[EASY].name) == ("challenger", "auto")
        assert (found[EASY].result, found[HARD].result) == ("agree", "disagree")
        assert (details[EASY]["champion"], details[EASY]["challenger"]) == ("cheap", "cheap")
        assert (details[HARD]["champion"], details[HARD]["challenger"]) == ("strong", "cheap")
        assert details[HARD]["candidate"] == "c0ffee"
        measured = live([{"result": label.result, "detail": details[p]}
                         for p, label in found.items()])  # fmt: skip
        assert measured is not None
        assert (measured.rows, measured.challenger, measured.champion) == (2, (0.5, 1.0),
                                                                           (1.0, 0.5))  # fmt: skip
        # Replaced by one that sends everything strong: nothing to compare on the hard prompt.
        challenger(path, threshold=-1e9, digest="beef")
        await watch.check()
        await route(chat(HARD))
        await until(lambda: len(heard) == 3)
        assert heard[2].result == "strong"
        assert len(inner.calls) == 5  # no call made for it
        # Removed: no more challenged requests.
        challenger_path(str(path)).unlink()
        await watch.check()
        await route(chat(HARD))
        assert len(heard) == 3
    reloads = shared.registry.get_sample_value
    assert reloads("levergate_router_reloads_total", {"route": "auto",
                                                      "result": "challenger"}) == 2  # fmt: skip


async def test_a_challenger_for_other_models_is_refused_and_the_route_runs_without(
    tmp_path: Path,
) -> None:
    path = router_file(tmp_path)
    route, _, shared, watch, heard = built(path)
    (tmp_path / "other").mkdir()
    other = router_file(tmp_path / "other", cheap="someone-else")
    router, _ = load(other)
    marked = router.model_copy(update={"training": {"challenge": {"share": 1.0, "sha256": "x"}}})
    marked.save(challenger_path(str(path)))
    await watch.check()
    await route(chat(EASY))
    assert heard == []
    wanted = {"route": "auto", "result": "challenger_refused"}
    assert shared.registry.get_sample_value("levergate_router_reloads_total", wanted) == 1


def test_live_numbers_leave_failed_comparisons_out() -> None:
    cheap, strong = (
        {"challenger": "cheap", "champion": "cheap"},
        {"challenger": "strong", "champion": "strong"},
    )
    rows = [
        {"result": "failed", "detail": cheap},
        {"result": "strong", "detail": strong},
        {"result": "disagree", "detail": {"challenger": "strong", "champion": "cheap"}},
    ]
    measured = live(rows)
    assert measured is not None
    assert (measured.rows, measured.challenger, measured.champion) == (2, (1.0, 0.0),
                                                                       (0.5, 0.5))  # fmt: skip
    assert live(rows[:1]) is None
