"""The MiniLM embedder on the real ONNX model: unit vectors, paraphrases closer than unrelated
text, the OpenAI response shape, and concurrent callers merged into batches."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator

import numpy as np
import pytest

from levergate.config import LocalEmbeddingsSettings
from levergate.errors import BadRequest, ConfigError, ModelNotFound
from levergate.upstreams.embeddings_local import LocalEmbedder, default_embedder
from levergate.upstreams.embeddings_local.minilm import MiniLM, tokenizer_file


@pytest.fixture
async def embedder() -> AsyncIterator[LocalEmbedder]:
    made = default_embedder(LocalEmbeddingsSettings(batch_max=16, batch_wait_ms=20.0, threads=1))
    try:
        yield made
    finally:
        await made.aclose()


async def test_paraphrases_are_closer_than_unrelated_text(embedder: LocalEmbedder) -> None:
    vectors = np.array(
        await embedder.embed(
            ["The cat sits on the mat.", "A cat is sitting on a mat.", "Stocks fell sharply."]
        )
    )
    assert vectors.shape == (3, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)
    similarity = vectors @ vectors.T
    assert similarity[0, 1] > 0.8
    assert similarity[0, 2] < 0.3


async def test_the_openai_shape_with_usage_and_base64(embedder: LocalEmbedder) -> None:
    data = await embedder.answer({"input": ["hello world", "hi"]}, model="all-minilm-l6-v2")
    assert data["object"] == "list"
    assert [row["index"] for row in data["data"]] == [0, 1]
    assert data["usage"]["prompt_tokens"] == 2 + 2 + 1 + 2  # [CLS] ... [SEP] per text
    packed = await embedder.answer(
        {"input": "hello world", "encoding_format": "base64"}, model="all-minilm-l6-v2"
    )
    decoded = np.frombuffer(base64.b64decode(packed["data"][0]["embedding"]), dtype="<f4")
    assert np.allclose(decoded, data["data"][0]["embedding"], atol=1e-6)
    with pytest.raises(BadRequest):
        await embedder.answer({"input": [1, 2]}, model="all-minilm-l6-v2")
    with pytest.raises(BadRequest):
        await embedder.answer({"input": "x", "dimensions": 10}, model="all-minilm-l6-v2")


async def test_another_embedding_model_name_is_a_404_not_minilm_vectors_under_it(
    embedder: LocalEmbedder,
) -> None:
    with pytest.raises(ModelNotFound) as caught:
        await embedder.answer({"input": "hello"}, model="text-embedding-3-small")
    assert caught.value.http_status == 404
    assert caught.value.code == "model_not_found"
    assert "all-minilm-l6-v2" in caught.value.message


async def test_concurrent_single_text_calls_share_batches(embedder: LocalEmbedder) -> None:
    texts = [f"question number {i} about bread" for i in range(32)]
    alone = np.array(await embedder.embed(texts[:1]))
    together = await asyncio.gather(*[embedder.embed([t]) for t in texts])
    assert embedder.batcher.stats.batches < 1 + 32
    assert np.allclose(together[0], alone, atol=1e-4)  # padding in a batch changes nothing


def test_the_tokenizer_ships_inside_levergate_and_a_missing_model_is_a_config_error() -> None:
    assert tokenizer_file().is_file()
    assert (tokenizer_file().parent / "NOTICE").is_file()
    with pytest.raises(ConfigError, match="MiniLM"):
        LocalEmbedder(LocalEmbeddingsSettings(model_path="/nonexistent/model.onnx"))


def test_spin_false_turns_off_onnxruntimes_spinning_threads() -> None:
    entry = "session.intra_op.allow_spinning"
    quiet = MiniLM(LocalEmbeddingsSettings(spin=False, threads=1))._session
    assert quiet.get_session_options().get_session_config_entry(entry) == "0"
    busy = MiniLM(LocalEmbeddingsSettings(threads=1))._session
    with pytest.raises(RuntimeError, match=entry):  # never set: onnxruntime's default, spinning
        busy.get_session_options().get_session_config_entry(entry)
