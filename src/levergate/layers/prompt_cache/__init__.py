"""The prompt-cache optimizer: make provider (and self-hosted engine) prefix caches hit."""

from levergate.layers.prompt_cache.layer import PromptCacheOptimizer, Provider
from levergate.layers.prompt_cache.lint import Finding, Findings
from levergate.layers.prompt_cache.state import PromptCacheState

__all__ = ["Finding", "Findings", "PromptCacheOptimizer", "PromptCacheState", "Provider"]
