"""A fake OpenAI-compatible provider for tests, demos and benchmarks (`levergate sim`).

Every answer is marked as simulated (`x-simulated: levergate-sim` header,
`system_fingerprint: "levergate-sim"`). It is deterministic for a seed, models latency (TTFT,
prefill, decode pace, jitter), per-key RPM/TPM limits with OpenAI's headers, faults (5xx,
hangs, cut streams, malformed bodies) and OpenAI-style prompt caching.

    async with run_simulator(SimSettings(limits={"rpm": 5})) as sim:
        client = openai.AsyncOpenAI(base_url=sim.base_url, api_key="sk-test")
        ...
        sim.configure({"faults": {"error_rate": 1.0}})
        assert sim.stats()["rate_limited"] == 0
"""

from __future__ import annotations

from levergate.simulator.faults import FAULT_HEADER, Fault
from levergate.simulator.generate import OUTPUT_TOKENS_HEADER
from levergate.simulator.runner import SimHandle, run_simulator, serve
from levergate.simulator.server import SimServer
from levergate.simulator.settings import (
    SIMULATED_HEADER,
    SIMULATED_VALUE,
    FaultSettings,
    HardPromptSettings,
    LatencySettings,
    LimitSettings,
    PromptCacheSettings,
    SimSettings,
)
from levergate.simulator.simulator import Simulator

__all__ = [
    "FAULT_HEADER",
    "OUTPUT_TOKENS_HEADER",
    "SIMULATED_HEADER",
    "SIMULATED_VALUE",
    "Fault",
    "FaultSettings",
    "HardPromptSettings",
    "LatencySettings",
    "LimitSettings",
    "PromptCacheSettings",
    "SimHandle",
    "SimServer",
    "SimSettings",
    "Simulator",
    "run_simulator",
    "serve",
]
