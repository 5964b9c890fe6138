"""What every alias's prompt-cache optimizer shares: the findings and the metrics (built once,
in `Shared.build`)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

from levergate.config.prompt_cache import PromptCacheSettings
from levergate.layers.prompt_cache.lint import Findings


class PromptCacheState:
    """What every alias's optimizer shares: the findings and the metrics."""

    def __init__(self, settings: PromptCacheSettings, *, registry: CollectorRegistry) -> None:
        self.findings = Findings(keep=settings.lint.keep_findings)
        self.breaks = Counter(
            "levergate_prefix_breaks", "Prompt-cache breakers found by comparing requests",
            ["model", "kind"], registry=registry,
        )  # fmt: skip
        self.breakpoints = Counter(
            "levergate_prompt_cache_breakpoints", "Anthropic cache breakpoints placed",
            ["model", "boundary", "ttl"], registry=registry,
        )  # fmt: skip
