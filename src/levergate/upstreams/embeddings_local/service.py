"""`LocalEmbedder`: the MiniLM model behind its micro-batcher, as an `Embedder` and as the
`/v1/embeddings` answer of a local upstream.

It satisfies `levergate.core.embedder.Embedder` (what the semantic cache calls) and turns an
OpenAI embeddings request into the OpenAI response shape, with usage counted in MiniLM tokens.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Mapping
from typing import Any

import numpy as np

from levergate.config import LocalEmbeddings
from levergate.errors import BadRequest, ModelNotFound
from levergate.upstreams.embeddings_local.batcher import MicroBatcher
from levergate.upstreams.embeddings_local.minilm import Embedded, MiniLM


class LocalEmbedder:
    def __init__(self, settings: LocalEmbeddings) -> None:
        self.settings = settings
        self.model = MiniLM(settings)
        self.batcher = MicroBatcher(
            self.model.encode,
            max_size=settings.batch_max,
            max_wait=settings.batch_wait_ms / 1000.0,
        )

    async def embed(self, texts: list[str]) -> list[list[float]]:
        """Unit-length 384-dimensional vectors, one per text."""
        embedded = await self._encode(texts)
        vectors: list[list[float]] = embedded.vectors.tolist()
        return vectors

    async def answer(self, body: Mapping[str, Any], *, model: str) -> dict[str, Any]:
        """The OpenAI `/v1/embeddings` response for `body`, which must name this model: a
        client asking for another one (`text-embedding-3-small`) expects its dimensions and
        its vector space, and 384 MiniLM dimensions under that name would break it silently.
        A gateway alias (`models: [{name: ..., upstream: local, upstream_model: <this>}]`)
        maps another name here on purpose."""
        check_model(model, served=self.settings.model_name, dimensions=self.model.dimensions)
        texts = _texts(body.get("input"))
        dimensions = body.get("dimensions")
        if dimensions is not None and dimensions != self.model.dimensions:
            raise BadRequest(
                f"this model's embeddings have {self.model.dimensions} dimensions",
                param="dimensions",
            )
        as_base64 = body.get("encoding_format") == "base64"
        embedded = await self._encode(texts)
        data = [
            {"object": "embedding", "index": i, "embedding": _format(row, base64_=as_base64)}
            for i, row in enumerate(embedded.vectors)
        ]
        tokens = int(embedded.tokens.sum())
        return {
            "object": "list",
            "data": data,
            "model": model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }

    async def aclose(self) -> None:
        await asyncio.to_thread(self.batcher.close)

    async def _encode(self, texts: list[str]) -> Embedded:
        if not texts:
            empty = np.zeros((0, self.model.dimensions), dtype=np.float32)
            return Embedded(empty, np.zeros(0, dtype=np.int64))
        return await self.batcher.encode(texts)


def check_model(model: str, *, served: str, dimensions: int) -> None:
    """404 model_not_found unless `model` is the embedding model this upstream serves."""
    if model != served:
        raise ModelNotFound(
            model,
            detail=(
                f"this local upstream embeds only with '{served}' ({dimensions} dimensions); "
                f"to send another name here, configure a model alias with "
                f"upstream_model: {served}"
            ),
        )


def _texts(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return [str(v) for v in value]
    raise BadRequest(
        "the local embedder takes 'input' as a string or a non-empty list of strings",
        param="input",
    )


def _format(row: np.ndarray[Any, Any], *, base64_: bool) -> list[float] | str:
    if base64_:
        return base64.b64encode(row.astype("<f4").tobytes()).decode()
    values: list[float] = row.tolist()
    return values
