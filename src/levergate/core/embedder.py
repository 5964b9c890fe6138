"""`Embedder`: the seam between whatever turns text into vectors and the levers that use them.

The semantic cache embeds the final user text through it, and the local `/v1/embeddings` route
serves one (the MiniLM ONNX model in `levergate.upstreams.embeddings_local`). It is one method,
so an in-memory implementation for tests is a few lines, and a remote embedder (an upstream's
`/v1/embeddings` called through the gateway) fits the same shape.
"""

from __future__ import annotations

from typing import Protocol


class Embedder(Protocol):
    async def embed(self, texts: list[str]) -> list[list[float]]:
        """One vector per text, in order. Vectors of one embedder all have the same length;
        whether they are normalized is the implementation's documented choice."""
        ...
