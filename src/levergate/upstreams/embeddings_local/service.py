"""`LocalEmbedder`: the MiniLM model behind the generic micro-batcher (`core/microbatch.py`), as
an `Embedder` and as the `/v1/embeddings` answer of a local upstream.

The model is not thread-safe and a batch of 32 short texts costs little more than one, so one
worker thread owns it and concurrent requests are merged: a batch runs when `batch_max` texts
wait or the oldest has waited `batch_wait_ms`, and only one batch runs at a time — while it
does, the next one keeps filling (`max_running=1`), so under load batches grow by themselves.
The event loop never blocks on the model. A caller that gives up leaves its batch; the others
still get their rows.

It satisfies `levergate.core.embedder.Embedder` (what the semantic cache calls) and turns an
OpenAI embeddings request into the OpenAI response shape, with usage counted in MiniLM tokens.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from levergate.config import LocalEmbeddingsSettings
from levergate.core.clock import Clock, SystemClock
from levergate.core.microbatch import BatchLimits, MicroBatcher
from levergate.errors import BadRequest, ModelNotFound
from levergate.upstreams.embeddings_local.minilm import Embedded, MiniLM


class LocalEmbedder:
    def __init__(self, settings: LocalEmbeddingsSettings, *, clock: Clock | None = None) -> None:
        self.settings = settings
        self.model = MiniLM(settings)
        # The model's one thread: `MiniLM.encode` is only ever called from here.
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="levergate-embed")
        limits = BatchLimits(
            max_wait=settings.batch_wait_ms / 1000.0,
            max_items=settings.batch_max,
            max_requests=settings.batch_max,
            max_running=1,
        )
        self.batcher: MicroBatcher[list[str], Embedded] = MicroBatcher(
            self._run, limits=limits, clock=clock or SystemClock(), items=len
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
        await asyncio.to_thread(self.close)

    def close(self) -> None:
        """Stop the model thread after the batch it is running (blocking: off the loop)."""
        self._thread.shutdown(wait=True, cancel_futures=True)

    async def _encode(self, texts: list[str]) -> Embedded:
        if not texts:
            empty = np.zeros((0, self.model.dimensions), dtype=np.float32)
            return Embedded(empty, np.zeros(0, dtype=np.int64))
        return await self.batcher.submit(list(texts))

    async def _run(self, jobs: Sequence[list[str]]) -> list[Embedded]:
        texts = [text for job in jobs for text in job]
        loop = asyncio.get_running_loop()
        embedded = await loop.run_in_executor(self._thread, self._encode_all, texts)
        return split(embedded, [len(job) for job in jobs])

    def _encode_all(self, texts: list[str]) -> Embedded:
        """On the model thread; a lone request longer than a batch is run in batch-sized parts."""
        size = self.settings.batch_max
        parts = [self.model.encode(texts[i : i + size]) for i in range(0, len(texts), size)]
        return Embedded(
            np.concatenate([p.vectors for p in parts]), np.concatenate([p.tokens for p in parts])
        )


def split(embedded: Embedded, sizes: Sequence[int]) -> list[Embedded]:
    """One batch's rows back to its requests, in order."""
    bounds = np.cumsum([0, *sizes])
    return [
        Embedded(embedded.vectors[a:b], embedded.tokens[a:b]) for a, b in itertools.pairwise(bounds)
    ]


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
