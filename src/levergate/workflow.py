"""Traced multi-step workflows: the independent steps of a retrieval or agent workflow run in
parallel under one workflow id, one deadline and a step limit.

    async with gw.workflow("rag-1", timeout=20, max_parallel=4) as wf:
        docs, web = await wf.gather(
            ("retrieve", lambda c: gw.embed(model="e", input=question, controls=c)),
            ("search", lambda c: search_tool(question)),  # any coroutine: a tool call
        )
        answer = await wf.run("answer", lambda c: gw.chat(model="m", messages=..., controls=c))
    wf.steps, wf.critical_path()

Each step gets the `Controls` to make its gateway calls with: the workflow id (so every
request record, log line and trace of the workflow carries it), the step's name as the feature
tag (metrics and the dashboard break down by it), the workflow's priority and its deadline
(absolute: a step started late gets what is left, not a fresh timeout). A step that is not a
gateway call is held to the same deadline by the workflow itself. `wf.steps` records each
step's name, times and error; `critical_path()` names the chain of steps that set the
workflow's latency.

With tracing on (`otel.endpoint`), a workflow is one trace: its own span (its step count,
failed steps and critical path as attributes), a span per step under it, and each step's
gateway calls under that step's span (the step's `Controls.trace` carries the parent), so a
trace viewer shows the steps' latency, the calls' cost and the critical path together. The
workflow's spans are exported when its `async with` block ends; sampled at `otel.sample_ratio`
as a whole.

A step that raises is recorded as that step's error; the policy decides the rest: `fail_fast`
(the default) cancels the step's siblings and raises, `fail_fast=False` returns the exception in
that step's slot of `gather` and goes on.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from levergate.core.controls import Controls, Priority
from levergate.core.spans import Internal, new_span_id, new_trace_id, traceparent

if TYPE_CHECKING:
    from levergate.core.clock import Clock

WORKFLOW_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
MAX_STEPS = 10_000  # steps one workflow records (a runaway agent loop stops here)

StepFn = Callable[[Controls], Awaitable[Any]]


class StepLimitReached(RuntimeError):
    """The workflow already ran `max_steps` steps."""


@dataclass(slots=True)
class Step:
    name: str
    started: float
    ended: float | None = None
    error: BaseException | None = None
    span_id: int = 0  # the step's span when the workflow is traced

    @property
    def seconds(self) -> float | None:
        return None if self.ended is None else self.ended - self.started


@dataclass(frozen=True, slots=True)
class WorkflowTracing:
    """A traced workflow (`Gateway.workflow` sets it when `otel.endpoint` is): whether this one
    is sampled, and where its spans go when it ends (`Recorder.trace_internal`)."""

    sampled: bool
    export: Callable[[Sequence[Internal], float], None]  # (spans, the clock's now)


class Workflow:
    def __init__(
        self,
        clock: Clock,
        workflow_id: str | None = None,
        *,
        timeout: float | None = None,
        max_parallel: int = 8,
        max_steps: int = 100,
        fail_fast: bool = True,
        priority: Priority = Priority.DEFAULT,
        tracing: WorkflowTracing | None = None,
    ) -> None:
        self.id = workflow_id or f"wf-{os.urandom(8).hex()}"
        if WORKFLOW_ID.fullmatch(self.id) is None:
            raise ValueError("a workflow id is 1 to 128 of A-Z a-z 0-9 . _ : -")
        if not 1 <= max_parallel <= MAX_STEPS or not 1 <= max_steps <= MAX_STEPS:
            raise ValueError(f"max_parallel and max_steps must be between 1 and {MAX_STEPS}")
        if timeout is not None and not timeout > 0:
            raise ValueError("timeout must be a number of seconds > 0")
        self._clock = clock
        self.deadline = None if timeout is None else clock.now() + timeout
        self._slots = asyncio.Semaphore(max_parallel)
        self._max_steps = max_steps
        self.fail_fast = fail_fast
        self.priority = priority
        self.steps: list[Step] = []
        self.started = clock.now()
        self.ended: float | None = None
        self._tracing = tracing
        # The workflow's trace and its own span: its steps' spans hang under it, and the calls
        # each step makes under the step's (their `Controls.trace`).
        self.trace_id, self.span_id = (new_trace_id(), new_span_id()) if tracing else (0, 0)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.ended = self._clock.now()
        if self._tracing is not None and self._tracing.sampled:
            self._tracing.export(self.spans(error=exc), self.ended)

    def controls(self, step: str) -> Controls:
        """What a step's gateway calls carry: the workflow id, the step as feature, the deadline."""
        return Controls(
            priority=self.priority, deadline=self.deadline, feature=step, workflow=self.id
        )

    async def run(self, name: str, fn: StepFn) -> Any:
        """Run one step (under the step limit and the deadline) and return what it returns."""
        if len(self.steps) >= self._max_steps:
            raise StepLimitReached(f"workflow {self.id} already ran {self._max_steps} steps")
        async with self._slots:
            step = Step(name, self._clock.now(), span_id=new_span_id() if self._tracing else 0)
            self.steps.append(step)
            controls = self.controls(name)
            if self._tracing is not None:
                sampled = self._tracing.sampled
                parent = traceparent(self.trace_id, step.span_id, sampled=sampled)
                controls = dataclasses.replace(controls, trace=parent)
            try:
                left = None if self.deadline is None else self.deadline - self._clock.now()
                async with asyncio.timeout(left):
                    return await fn(controls)
            except BaseException as exc:
                step.error = exc
                raise
            finally:
                step.ended = self._clock.now()

    async def gather(self, *steps: tuple[str, StepFn]) -> list[Any]:
        """Run independent steps in parallel; their results in order. A failing step: with
        `fail_fast`, its siblings are cancelled and its error raised; else the error is its
        slot's result."""
        if not self.fail_fast:
            return list(
                await asyncio.gather(*(self.run(n, f) for n, f in steps), return_exceptions=True)
            )
        tasks: list[asyncio.Task[Any]] = []
        try:
            async with asyncio.TaskGroup() as group:
                tasks = [group.create_task(self.run(n, f)) for n, f in steps]
        except BaseExceptionGroup as grouped:
            raise _first(grouped) from None
        return [task.result() for task in tasks]

    def spans(self, *, error: BaseException | None = None) -> list[Internal]:
        """The traced workflow as spans: its own (with its step count, failed steps and critical
        path), then one per step under it; `error` ended the workflow, if anything did."""
        ended = self.ended if self.ended is not None else self._clock.now()
        failed = [s for s in self.steps if s.error is not None]
        root = Internal(
            f"workflow {self.id}", self.trace_id, self.span_id, None, self.started, ended,
            {"levergate.workflow": self.id, "levergate.workflow.steps": len(self.steps),
             "levergate.workflow.failed_steps": len(failed),
             "levergate.workflow.critical_path": self.critical_path()},
            None if error is None else type(error).__name__,
        )  # fmt: skip
        return [root, *(self._step_span(step, ended) for step in self.steps)]

    def _step_span(self, step: Step, ended: float) -> Internal:
        return Internal(
            f"step {step.name}", self.trace_id, step.span_id, self.span_id, step.started,
            step.ended if step.ended is not None else ended,
            {"levergate.workflow": self.id, "levergate.step": step.name},
            None if step.error is None else type(step.error).__name__,
        )  # fmt: skip

    def critical_path(self) -> list[str]:
        """The steps that set the workflow's latency, first to last: from the step that ended
        last, back through the step that ended last before it started, and so on.

        Examples:
            >>> from levergate.testing import LoopClock, run_virtual
            >>> async def plan() -> list[str]:
            ...     wf = Workflow(LoopClock(), "doc")
            ...     nap = asyncio.sleep
            ...     await wf.gather(("a", lambda _: nap(1)), ("b", lambda _: nap(2)))
            ...     await wf.run("c", lambda _: nap(1))
            ...     return wf.critical_path()
            >>> run_virtual(plan())
            ['b', 'c']
        """
        finished = [s for s in self.steps if s.ended is not None]
        path: list[Step] = []
        horizon = float("inf")
        while True:
            before = [s for s in finished if s.ended is not None and s.ended <= horizon]
            if not before:
                break
            last = max(before, key=lambda s: (s.ended, -s.started))
            path.append(last)
            horizon = last.started
            finished = [s for s in finished if s is not last and s.started < last.started]
        return [s.name for s in reversed(path)]


def _first(grouped: BaseExceptionGroup[BaseException]) -> BaseException:
    """The error a fail-fast gather raises: the first step error that is not a cancellation."""
    for exc in grouped.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            return _first(exc)
        if not isinstance(exc, asyncio.CancelledError):
            return exc
    return grouped.exceptions[0]
