"""A RAG-style workflow: retrieval and a sub-question in parallel, then the answer — one
workflow id on every request record, each step its own feature, one deadline for all of it.

    python examples/rag_workflow.py

Runs against the simulator, started here; the records go to a sink of the example's own.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict

from levergate import Deps, Gateway, RequestRecord, Settings
from levergate.simulator import SimSettings, run_simulator


class Trace:
    """A `Sink`: each finished request's record, grouped by workflow."""

    def __init__(self) -> None:
        self.by_workflow: dict[str | None, list[RequestRecord]] = defaultdict(list)

    def emit(self, record: RequestRecord) -> None:
        self.by_workflow[record.workflow].append(record)


async def main() -> None:
    trace = Trace()
    async with run_simulator(SimSettings(port=0)) as sim:
        settings = Settings.for_upstream(sim.base_url)
        async with Gateway(settings, deps=Deps(sinks=[trace])) as gw:
            question = "Which plan includes priority support?"
            ask = [{"role": "user", "content": question}]
            async with gw.workflow("rag-demo", timeout=30, max_parallel=3) as wf:
                found, sub = await wf.gather(
                    ("retrieve", lambda c: gw.embed(model="m", input=question, controls=c)),
                    ("rewrite", lambda c: gw.chat(model="m", messages=ask, max_tokens=8,
                                                  controls=c)),
                )  # fmt: skip
                context = f"{len(found['data'][0]['embedding'])}-dim match; {sub['object']}"
                final = [{"role": "user", "content": f"{question}\nContext: {context}"}]
                answer = await wf.run(
                    "answer", lambda c: gw.chat(model="m", messages=final, controls=c)
                )
            for _ in range(100):  # records are emitted once each answer has gone out
                if len(trace.by_workflow["rag-demo"]) >= 3:
                    break
                await asyncio.sleep(0.01)
    records = trace.by_workflow["rag-demo"]
    assert sorted(r.feature for r in records) == ["answer", "retrieve", "rewrite"]
    assert wf.critical_path()[-1] == "answer"
    assert answer["choices"][0]["message"]["content"]
    for step in wf.steps:
        print(f"{step.name:>8}: {1000 * (step.seconds or 0):.1f} ms")
    print("critical path:", " -> ".join(wf.critical_path()))
    print("cost of the workflow: $", round(sum(r.cost_usd for r in records), 6))


if __name__ == "__main__":
    asyncio.run(main())
