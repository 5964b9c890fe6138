"""A cached FAQ bot: the same questions asked over and over reach the provider once each; the
rest are answered from the gateway's exact cache, and the records say which were hits.

    python examples/cached_faq.py

Runs against the simulator, started here.
"""

from __future__ import annotations

import asyncio

from levergate import Deps, Gateway, RequestRecord, Settings
from levergate.simulator import SimSettings, run_simulator

FAQ = ["How do I reset my password?", "Where is my invoice?", "Can I change my plan?"]


class Hits:
    def __init__(self) -> None:
        self.records: list[RequestRecord] = []

    def emit(self, record: RequestRecord) -> None:
        self.records.append(record)


async def main() -> None:
    hits = Hits()
    async with run_simulator(SimSettings(port=0)) as sim:
        settings = Settings.for_upstream(sim.base_url)
        async with Gateway(settings, deps=Deps(sinks=[hits])) as gw:
            # First round: every question is new. Then the users ask them again, many at once.
            first = await gw.map(FAQ, model="m", temperature=0, max_tokens=12)
            again = await gw.map(FAQ * 5, model="m", temperature=0, max_tokens=12)
            for _ in range(100):
                if len(hits.records) >= len(FAQ) * 6:
                    break
                await asyncio.sleep(0.01)
        asked = sim.stats()["requests_total"]
    answers = [a["choices"][0]["message"]["content"] for a in first if isinstance(a, dict)]
    repeated = [a["choices"][0]["message"]["content"] for a in again if isinstance(a, dict)]
    assert repeated == answers * 5  # the same answer each time, in input order
    assert asked == len(FAQ), asked  # the provider saw each question once
    saved = sum(1 for r in hits.records if r.cache is not None and r.cache.outcome != "miss")
    assert saved == len(FAQ) * 5, saved  # every repeat: a hit (or shared a twin in flight)
    print(f"{len(FAQ) * 6} questions, {asked} reached the provider, {saved} from the cache")


if __name__ == "__main__":
    asyncio.run(main())
