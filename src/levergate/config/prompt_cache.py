"""Provider prompt caching: prefix linting, canonical tool order, OpenAI `prompt_cache_key`,
automatic Anthropic `cache_control` breakpoints (layers/prompt_cache.py)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from levergate.config.base import _Strict


class PrefixLintSettings(_Strict):
    """Comparing a route's requests to find early content that breaks prefix caching
    (policies/prefix_lint.py). Sampled: at most one request per model alias every
    `every_seconds` is compared, with the last `compare_with` sampled ones."""

    enabled: bool = True
    every_seconds: float = Field(1.0, ge=0)
    compare_with: int = Field(4, ge=1, le=64)
    # A span counts as a cache breaker when the prompts agree for this long after it, and it
    # is itself at most `max_span_bytes` long (a different prompt is not a breaker).
    min_shared_bytes: int = Field(2048, ge=64)
    max_span_bytes: int = Field(256, ge=1, le=65536)
    scan_bytes: int = Field(65536, ge=1024, le=16 * 1024 * 1024)
    # Findings kept for `levergate analyze` and the admin API (newest first).
    keep_findings: int = Field(200, ge=0, le=100_000)


class BreakpointsSettings(_Strict):
    """Automatic Anthropic `cache_control` breakpoints (policies/prompt_cache.py decides).
    Placed only where the observed reuse pays for the cache writes. Client breakpoints are
    kept; more than Anthropic's 4 is refused with a 400 before any call (no money spent)."""

    enabled: bool = True
    # Anthropic's minimum cacheable prefix: 1,024 tokens on most models, 2,048 on Haiku.
    min_tokens: int = Field(1024, ge=1)
    # A content part at least this long (a retrieved document) gets a boundary of its own.
    document_tokens: int = Field(1024, ge=1)
    # Multiples of the input price: a 5-minute write, a 1-hour write, a read.
    write_5m: float = Field(1.25, ge=0)
    write_1h: float = Field(2.0, ge=0)
    read: float = Field(0.1, ge=0)
    ttl: Literal["auto", "5m", "1h"] = "auto"  # auto: the cheaper for the observed reuse
    prefixes: int = Field(50_000, ge=1, le=10_000_000)  # prefixes whose reuse is remembered


class PromptCacheSettings(_Strict):
    enabled: bool = True
    lint: PrefixLintSettings = Field(default_factory=PrefixLintSettings)
    # Tools sorted by name and schema keys sorted (`properties` keep their order: structured
    # output generates fields in it). Changes what the model reads, so off by default.
    canonical_tools: bool = False
    # `prompt_cache_key` from the tenant and the first ~256 tokens (what OpenAI routes by):
    # `auto` sets it for upstreams at api.openai.com only (others may reject the field).
    openai_cache_key: Literal["auto", "on", "off"] = "auto"
    breakpoints: BreakpointsSettings = Field(default_factory=BreakpointsSettings)
