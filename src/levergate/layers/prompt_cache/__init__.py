"""The prompt-cache optimizer: make provider (and self-hosted engine) prefix caches hit."""

from levergate.layers.prompt_cache.layer import PromptCacheOptimizer, PromptCacheState, Provider
from levergate.layers.prompt_cache.lint import Finding, Findings

__all__ = ["Finding", "Findings", "PromptCacheOptimizer", "PromptCacheState", "Provider"]
