"""MiniLM with int8 MatMuls, built from the packaged model: really integer matrix products, built
once and then read from the cache, vectors close to the float graph's, and a build that cannot
happen is a clear start-up error (the float graph's other vectors would mislead a router)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from levergate.config import LocalEmbeddingsSettings
from levergate.errors import ConfigError
from levergate.upstreams.embeddings_local.minilm import MiniLM
from levergate.upstreams.embeddings_local.quantize import int8_model

TEXTS = [
    "What is the capital of France?",
    "Prove that the square root of 2 is irrational.",
    "A cat is sitting on a mat.",
    "Which of the following best describes the function of the mitochondria? A. energy B. DNA",
]


def packaged() -> Path:
    path = LocalEmbeddingsSettings().model_path
    assert path is not None
    return Path(path)


def op_counts(path: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for node in onnx.load(str(path)).graph.node:
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return counts


def test_the_built_graph_multiplies_in_int8_and_is_built_once(tmp_path: Path) -> None:
    source = packaged()
    assert op_counts(source).get("MatMulInteger", 0) == 0  # the package dequantizes in-graph
    built = int8_model(source, tmp_path)
    assert built.parent == tmp_path / "models"
    assert op_counts(built).get("MatMulInteger", 0) >= 36  # 6 layers x (q, k, v, out, 2 FFN)
    stamp = built.stat().st_mtime_ns
    assert int8_model(source, tmp_path) == built
    assert built.stat().st_mtime_ns == stamp  # read from the cache, not rebuilt
    assert [p.name for p in built.parent.iterdir()] == [built.name]  # no leftovers


def test_building_leaves_an_unconfigured_root_logger_unconfigured(tmp_path: Path) -> None:
    """onnxruntime's quantizer calls logging.warning, which would basicConfig() the root logger
    of a process that never configured logging (pytest's own handlers hide that in-process)."""
    script = (
        "import logging, pathlib, sys\n"
        "from levergate.upstreams.embeddings_local.quantize import int8_model\n"
        "int8_model(pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]))\n"
        "print(len(logging.getLogger().handlers))\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(packaged()), str(tmp_path)],
                          capture_output=True, text=True, timeout=120, check=True)  # fmt: skip
    assert done.stdout.strip() == "0"
    assert "pre-processing" not in done.stderr


def test_int8_vectors_stay_close_to_the_float_graphs(tmp_path: Path) -> None:
    plain = MiniLM(LocalEmbeddingsSettings(threads=1)).encode(TEXTS).vectors
    quick = MiniLM(LocalEmbeddingsSettings(threads=1, quantize="int8", cache_dir=str(tmp_path)))
    vectors = quick.encode(TEXTS).vectors
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)
    cosines = (vectors * plain).sum(axis=1)
    assert cosines.min() > 0.97
    # Still an embedding: each text is nearest its own float vector.
    assert list((vectors @ plain.T).argmax(axis=1)) == list(range(len(TEXTS)))


def test_a_cache_that_is_a_file_is_a_clear_start_up_error(tmp_path: Path) -> None:
    blocked = tmp_path / "cache"
    blocked.write_text("not a folder")
    with pytest.raises(ConfigError, match="cannot build the int8 embedder"):
        int8_model(packaged(), blocked)
    with pytest.raises(ConfigError, match="cache_dir"):
        MiniLM(LocalEmbeddingsSettings(quantize="int8", cache_dir=str(blocked)))


def test_a_file_that_is_no_model_is_not_built(tmp_path: Path) -> None:
    broken = tmp_path / "model.onnx"
    broken.write_bytes(b"\x00garbage")
    with pytest.raises(ConfigError, match=r"model\.onnx"):
        int8_model(broken, tmp_path / "cache")
    assert not list((tmp_path / "cache" / "models").glob("*"))  # nothing half-written left


def test_the_identity_names_the_matmuls() -> None:
    plain = LocalEmbeddingsSettings()
    assert plain.identity == "all-minilm-l6-v2"
    quick = plain.named("all-minilm-l6-v2+int8")
    assert quick is not None
    assert (quick.quantize, quick.identity) == ("int8", "all-minilm-l6-v2+int8")
    assert plain.named("all-minilm-l6-v2") == plain
    assert plain.named("bge-small") is None
