"""Exploration: a learned route's answers from its default, compared with what the learned cheap
alias answers off the path, are labels where the router chose the strong model; counted apart
from the retention gauge (the client got the default's answer)."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry

from levergate.core.clock import SystemClock
from levergate.layers.measure.shadow_labels import ShadowLabel
from levergate.layers.route import Route
from levergate.layers.shared import Shared
from tests.unit.layers.test_route import Keywords, chat, router_file, settings
from tests.unit.layers.test_route_shadow import Scripted
from tests.waiting import running, until

SAME, OTHER = "prove the theorem on this integral", "derivative and integral, prove it"


async def test_answers_from_the_default_are_explored_with_the_cheap_alias(tmp_path: Path) -> None:
    learned = {"file": str(router_file(tmp_path)), "cheap": "mini", "strong": "big",
               "explore": 1.0}  # fmt: skip
    s = settings({"routes": [{"name": "auto", "default": "big", "learned": learned}]})
    models = {m.name: m for m in s.models}
    registry = CollectorRegistry()
    shared = Shared.build(s, models=models, clock=SystemClock(), registry=registry)
    heard: list[ShadowLabel] = []
    shared.shadow_labels.listen(heard.append)
    layer = Route.layer(s.routing, models=models, shared=shared, embedder=Keywords())
    assert layer is not None
    inner = Scripted({("mini", SAME): "42", ("big", SAME): "42", ("big", OTHER): "7"})
    route = layer(inner)
    (job,) = [j for j in shared.jobs if j.name == "route_shadow"]
    async with running(job.run):
        for text in (SAME, OTHER, "thanks a lot"):
            await route(chat(text))
        await until(lambda: len(heard) == 2)
    assert [c.model for c in inner.calls[:3]] == ["big", "big", "mini"]  # the client's calls
    assert sorted(c.model for c in inner.calls[3:]) == ["mini", "mini"]  # explored, off path
    found = {label.prompt: label for label in heard}
    assert (found[SAME].result, found[OTHER].result) == ("agree", "disagree")
    assert (found[OTHER].cheap, found[OTHER].strong) == ("mini", "big")
    assert (found[OTHER].cheap_text, found[OTHER].strong_text) == ("mini", "7")

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    assert value("levergate_route_shadow_total", route="auto", result="explored_agree") == 1
    assert value("levergate_route_shadow_total", route="auto", result="explored_disagree") == 1
    assert value("levergate_route_quality_retention", route="auto") is None
