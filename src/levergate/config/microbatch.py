"""Micro-batching of `/v1/embeddings` requests to HTTP upstreams (layers/microbatch.py).

Off by default. It trades a few milliseconds of every lone request (+3 ms p50 measured) for
fewer upstream calls under concurrency: 64 concurrent one-input clients against the simulator
made 0.21x the upstream calls (benchmarks/results/microbatch.md), each batch one request against
the provider's RPM limit. But it changes what a request is upstream: requests
share one call (one rate-limit unit, one retry), and a request's `usage.prompt_tokens` is its
prorated share of the batch's (flagged `x-levergate-microbatch-usage: prorated`). An operator
turns it on where that trade is wanted: everywhere with `enabled`, or per model alias in
`models` (whose fields override these).

    microbatch:
      enabled: false
      models:
        text-embedding-3-small: {enabled: true, max_wait_ms: 5}
"""

from __future__ import annotations

from pydantic import Field

from levergate.config.base import _Strict

# OpenAI's embeddings endpoint takes at most 2,048 inputs and 300,000 tokens per request.
MAX_INPUTS = 2048


class MicroBatchRuleSettings(_Strict):
    """One alias's override; unset fields take the section's values."""

    enabled: bool | None = None
    max_wait_ms: float | None = Field(None, ge=0, le=1000)
    max_inputs: int | None = Field(None, ge=1, le=MAX_INPUTS)
    max_requests: int | None = Field(None, ge=1, le=MAX_INPUTS)
    max_bytes: int | None = Field(None, ge=1024, le=64 * 1024 * 1024)
    max_running: int | None = Field(None, ge=1, le=4096)


class MicroBatchSettings(_Strict):
    enabled: bool = False
    # How long the first request of a batch waits for company: a few ms against an embeddings
    # call of 50-300 ms at a hosted provider.
    max_wait_ms: float = Field(3.0, ge=0, le=1000)
    max_inputs: int = Field(MAX_INPUTS, ge=1, le=MAX_INPUTS)
    max_requests: int = Field(256, ge=1, le=MAX_INPUTS)
    # Input text per batch (UTF-8 bytes; token ids count 4 bytes each): 1 MB is about 250,000
    # tokens of English at ~4 bytes per token, under the 300,000 tokens OpenAI takes per call.
    max_bytes: int = Field(1_000_000, ge=1024, le=64 * 1024 * 1024)
    # Batches of one alias in flight at once; a batch due while all are busy keeps filling.
    max_running: int = Field(64, ge=1, le=4096)
    models: dict[str, MicroBatchRuleSettings] = Field(default_factory=dict)

    def for_model(self, name: str) -> MicroBatchSettings:
        """The settings for alias `name`: its override over the section's values."""
        rule = self.models.get(name)
        if rule is None:
            return self
        changes = {k: v for k, v in rule.model_dump().items() if v is not None}
        return self.model_copy(update=changes)
