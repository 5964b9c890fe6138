"""A cascade: every question goes to the cheap model first, and only the answers it is unsure
of (low token logprobs) go on to the strong one. The request records say which model answered,
why a question escalated, and what the cascade saved against asking the strong model always.

    python examples/cascade.py

Runs against the simulator, started here: it finds prompts containing "HARD" hard (its cheap
model answers them with low logprobs), and its strong model finds nothing hard.
"""

from __future__ import annotations

import asyncio

from levergate import Deps, Gateway, RequestRecord, Settings
from levergate.policies.pricing import Lever
from levergate.simulator import SimSettings, run_simulator

EASY = [f"What is {n} plus {n}?" for n in range(6)]
HARD = ["HARD: prove that there are infinitely many primes.", "HARD: why is the sky blue?"]


class Records:
    """A `Sink`: every finished request's record."""

    def __init__(self) -> None:
        self.seen: list[RequestRecord] = []

    def emit(self, record: RequestRecord) -> None:
        self.seen.append(record)


async def main() -> None:
    records = Records()
    provider = SimSettings.model_validate(
        {"port": 0, "hard": {"marker": "HARD", "strong_models": ["sim-large"]}}
    )
    async with run_simulator(provider) as sim:
        settings = Settings.load(
            upstreams=[{"name": "sim", "base_url": sim.base_url}],
            models=[
                {"name": "small", "upstream": "sim", "upstream_model": "sim-small",
                 "price": {"input": 0.15, "output": 0.60}},  # $ per million tokens
                {"name": "large", "upstream": "sim", "upstream_model": "sim-large",
                 "price": {"input": 2.50, "output": 10.00}},
            ],
            cascade={"cascades": [{
                "name": "qa", "steps": ["small", "large"],
                "checks": [{"kind": "mean_logprob", "threshold": -0.5}],
            }]},
        )  # fmt: skip
        async with Gateway(settings, deps=Deps(sinks=[records])) as gw:
            # `model="qa"` names the cascade (`model="cascade:small>large"` works as well).
            answers = await gw.map(EASY + HARD, model="qa", max_tokens=16, max_concurrency=4)
            for _ in range(200):  # records are written just after each answer
                if len(records.seen) == len(answers):
                    break
                await asyncio.sleep(0.01)
    assert all(isinstance(a, dict) for a in answers), answers
    by_question = {r.request_id: r for r in records.seen}
    assert len(by_question) == len(EASY) + len(HARD)
    served = [a["model"] for a in answers if isinstance(a, dict)]
    assert served == ["sim-small"] * len(EASY) + ["sim-large"] * len(HARD), served
    escalated = [r for r in records.seen if r.escalations]
    assert len(escalated) == len(HARD)
    assert all(r.alias == "large" and r.escalation_reasons for r in escalated)
    saved = sum(r.savings.get(Lever.ROUTE, 0.0) for r in records.seen)
    spent = sum(r.cost_usd for r in records.seen)
    assert saved > 0, saved  # six cheap answers outweigh two questions paid twice
    print(f"{len(EASY)} answered by the cheap model, {len(escalated)} escalated "
          f"({escalated[0].escalation_reasons[0]}); spent ${spent:.6f}, "
          f"saved ${saved:.6f} against the strong model alone")  # fmt: skip


if __name__ == "__main__":
    asyncio.run(main())
