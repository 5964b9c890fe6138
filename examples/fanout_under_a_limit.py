"""500 prompts under a provider's rate limit, in one call: `gw.map` paces them through the
gateway's limiter, so the provider refuses none of them, and the answers come back in order.

    python examples/fanout_under_a_limit.py [--items 500]

Runs against the simulator (a provider allowing 20 requests per second per key), started here.
"""

from __future__ import annotations

import argparse
import asyncio
import time

from levergate import Gateway, Settings
from levergate.simulator import LimitSettings, SimSettings, run_simulator


async def main(items: int) -> None:
    provider = SimSettings(port=0, limits=LimitSettings(rpm=20, window_seconds=1.0))
    async with run_simulator(provider) as sim:
        settings = Settings.load(
            upstreams=[{"name": "p", "base_url": sim.base_url, "api_key": "sk-example",
                        "key_limits": {"rpm": 20, "window_seconds": 1.0}}],
            models=[{"name": "m", "upstream": "p", "upstream_model": "sim-small"}],
            cache={"enabled": False},
        )  # fmt: skip
        prompts = [f"Classify review {n}." for n in range(items)]
        done: list[int] = []
        async with Gateway(settings) as gw:
            started = time.perf_counter()
            answers = await gw.map(prompts, model="m", max_concurrency=16, max_tokens=4,
                                   progress=lambda n, _total: done.append(n))  # fmt: skip
            seconds = time.perf_counter() - started
        assert len(answers) == items
        assert all(isinstance(a, dict) and a["object"] == "chat.completion" for a in answers)
        assert done[-1] == items
        refused = sim.stats()["rate_limited"]
        assert refused <= 1, refused  # the limiter paced them: the provider refused (almost) none
        print(f"{items} prompts in {seconds:.1f}s ({items / seconds * 60:.0f}/min), "
              f"{refused} refused by the provider")  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=500)
    asyncio.run(main(parser.parse_args().items))
