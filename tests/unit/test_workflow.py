"""The workflow helper (levergate/workflow.py): steps in parallel under a step limit and one
deadline, each step's controls carrying the workflow id and its name, errors per policy, and
the critical path read from the recorded steps. On virtual time: no real waiting."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from levergate.core.controls import Controls, Priority
from levergate.core.spans import Internal
from levergate.testing import LoopClock, run_virtual
from levergate.workflow import StepLimitReached, Workflow, WorkflowTracing


def sleeper(seconds: float, *, fails: bool = False) -> Any:
    async def step(controls: Controls) -> tuple[str, str | None, float | None]:
        await asyncio.sleep(seconds)
        if fails:
            raise RuntimeError(f"{controls.feature} broke")
        return controls.feature, controls.workflow, controls.deadline

    return step


def test_parallel_steps_share_the_id_and_the_deadline_and_the_critical_path_is_the_slow_chain() -> (
    None
):
    async def go() -> tuple[list[Any], Any, Workflow]:
        wf = Workflow(LoopClock(), "rag-1", timeout=10, max_parallel=2)
        first = await wf.gather(
            ("docs", sleeper(1.0)), ("web", sleeper(3.0)), ("rerank-cache", sleeper(0.5))
        )
        last = await wf.run("answer", sleeper(2.0))
        return first, last, wf

    first, last, wf = run_virtual(go())
    assert first == [
        ("docs", "rag-1", 10.0),
        ("web", "rag-1", 10.0),
        ("rerank-cache", "rag-1", 10.0),
    ]
    assert last == ("answer", "rag-1", 10.0)
    # Two at once: rerank-cache waited for docs' slot (started at 1.0, ended 1.5).
    started = {s.name: s.started for s in wf.steps}
    assert started == {"docs": 0.0, "web": 0.0, "rerank-cache": 1.0, "answer": 3.0}
    assert wf.critical_path() == ["web", "answer"]


def test_the_deadline_bounds_every_step_and_is_recorded_as_its_error() -> None:
    async def go() -> Workflow:
        wf = Workflow(LoopClock(), timeout=2, fail_fast=False)
        results = await wf.gather(("quick", sleeper(1.0)), ("slow", sleeper(5.0)))
        assert results[0][0] == "quick"
        assert isinstance(results[1], TimeoutError)
        return wf

    wf = run_virtual(go())
    assert wf.id.startswith("wf-")
    slow = next(s for s in wf.steps if s.name == "slow")
    assert isinstance(slow.error, TimeoutError)
    assert slow.seconds == 2.0


def test_fail_fast_cancels_the_siblings_and_raises_the_step_error() -> None:
    async def go() -> Workflow:
        wf = Workflow(LoopClock(), "w", priority=Priority.INTERACTIVE)
        with pytest.raises(RuntimeError, match="tool broke"):
            await wf.gather(("tool", sleeper(1.0, fails=True)), ("long", sleeper(60.0)))
        return wf

    wf = run_virtual(go())
    errors = {s.name: type(s.error).__name__ for s in wf.steps}
    assert errors == {"tool": "RuntimeError", "long": "CancelledError"}
    assert wf.controls("x").priority is Priority.INTERACTIVE


def test_the_step_limit_stops_a_runaway_loop() -> None:
    async def go() -> int:
        wf = Workflow(LoopClock(), max_steps=3)
        for _ in range(3):
            await wf.run("again", sleeper(0.1))
        with pytest.raises(StepLimitReached):
            await wf.run("again", sleeper(0.1))
        return len(wf.steps)

    assert run_virtual(go()) == 3


@pytest.mark.parametrize(
    "kwargs",
    [{"workflow_id": "has space"}, {"max_parallel": 0}, {"max_steps": 0}, {"timeout": 0}],
)
def test_bad_workflow_arguments_are_a_value_error(kwargs: dict[str, Any]) -> None:
    async def go() -> None:
        Workflow(LoopClock(), **kwargs)

    with pytest.raises(ValueError, match=r"workflow|between|timeout"):
        run_virtual(go())


def test_a_traced_workflow_puts_its_steps_calls_under_its_steps_spans() -> None:
    exported: list[tuple[Sequence[Internal], float]] = []
    parents: dict[str, str | None] = {}

    def step(seconds: float, *, fails: bool = False) -> Any:
        async def run(controls: Controls) -> None:
            parents[controls.feature] = controls.trace  # what the step's gateway calls carry
            await asyncio.sleep(seconds)
            if fails:
                raise RuntimeError("broke")

        return run

    async def go() -> Workflow:
        tracing = WorkflowTracing(sampled=True, export=lambda s, now: exported.append((s, now)))
        async with Workflow(LoopClock(), "traced", fail_fast=False, tracing=tracing) as wf:
            await wf.gather(("docs", step(1.0)), ("web", step(2.0, fails=True)))
            await wf.run("answer", step(1.0))
        return wf

    wf = run_virtual(go())
    [(spans, now)] = exported
    assert now == wf.ended == 3.0
    root, *steps = spans
    assert (root.name, root.parent_id, root.started, root.ended) == ("workflow traced", None, 0, 3)
    assert root.attributes["levergate.workflow.critical_path"] == ["web", "answer"]
    assert root.attributes["levergate.workflow.failed_steps"] == 1
    assert [s.name for s in steps] == ["step docs", "step web", "step answer"]
    assert {s.trace_id for s in spans} == {wf.trace_id}
    assert all(s.parent_id == root.span_id for s in steps)
    assert [s.error for s in steps] == [None, "RuntimeError", None]
    assert len({s.span_id for s in spans}) == 4
    # Each step's calls continue the trace as children of that step's span.
    for span in steps:
        name = span.name.removeprefix("step ")
        assert parents[name] == f"00-{wf.trace_id:032x}-{span.span_id:016x}-01"


def test_an_untraced_or_unsampled_workflow_exports_nothing() -> None:
    exported: list[object] = []
    seen: list[str | None] = []

    async def step(controls: Controls) -> None:
        seen.append(controls.trace)

    async def go(tracing: WorkflowTracing | None) -> None:
        async with Workflow(LoopClock(), tracing=tracing) as wf:
            await wf.run("only", step)

    run_virtual(go(None))
    run_virtual(go(WorkflowTracing(sampled=False, export=lambda s, now: exported.append(s))))
    assert exported == []
    assert seen[0] is None
    assert seen[1] is not None
    assert seen[1].endswith("-00")  # not sampled: the calls' spans are not kept either
