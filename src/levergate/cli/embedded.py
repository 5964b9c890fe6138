"""`levergate serve` with no upstream configured: the embedded default.

Until the local llama.cpp engine is the default, this serves through the built-in simulated
provider, and says so loudly: its answers are fake text with realistic shapes and timings.
"""

from __future__ import annotations

import asyncio
import sys

from levergate.config import WILDCARD, Settings
from levergate.gateway import Gateway
from levergate.server.run import serving
from levergate.upstreams.simulator import SimSettings, run_simulator


async def serve_embedded(settings: Settings) -> None:
    async with run_simulator(SimSettings(port=0)) as sim:
        upstream = {"name": "simulator", "base_url": sim.base_url}
        embedded = Settings.load(
            **settings.model_dump(exclude={"upstreams", "models"}),
            upstreams=[upstream],
            models=[{"name": WILDCARD, "upstream": "simulator"}],
        )
        async with serving(Gateway(embedded)) as url:
            print(
                f"levergate: serving on {url}\n"
                f"levergate: no upstream configured, so every model is answered by the built-in "
                f"SIMULATED provider at {sim.base_url} (fake answers).\n"
                f"levergate: use --upstream URL or --config FILE to reach a real model.",
                file=sys.stderr,
                flush=True,
            )
            await asyncio.Event().wait()
