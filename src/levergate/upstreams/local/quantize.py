"""Quantization as a lever: which levels a source model can give, building one once into the
cache directory, and never loading a damaged copy.

A level is produced by llama.cpp's own quantizer (`llama_model_quantize`) from the configured
file. Not every level is possible from every file:

- `f16` keeps a float model's weights unquantized. From a file that is already quantized it
  would only blow the size up (an F16 copy of a Q4_1 file is 3.5x the bytes with Q4_1's
  weights), so it is refused there; the source itself is then the reference.
- K-quants (`q4_k_m`, `q5_k_m`, `q6_k`) pack each row in blocks of 256 weights. llama.cpp quietly
  gives a matrix whose rows are not a multiple of 256 another type (Q4_K -> Q5_0, Q5_K -> Q5_1,
  Q6_K -> Q8_0); a level none of whose matrices can take it is refused, and a partial one is
  reported with its real mix (`Built.types`), so nobody benchmarks "Q4_K_M" that is Q5_0.

Built files are kept as `<stem>.<source tag>.<level>.gguf` with a `.json` beside them holding
the size and SHA-256 written when the build finished. Every start checks both before loading
(~0.1 s per 150 MB): a truncated, damaged or half-written file is rebuilt, never handed to
llama.cpp, whose loader trusts the tensor data it maps.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import logging
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import get_args

from levergate.config import Quantization
from levergate.errors import ConfigError
from levergate.upstreams.local.gguf import FLOAT_TYPES, GGUFInfo, read_gguf
from levergate.upstreams.local.runtime import import_llama

log = logging.getLogger("levergate.local")

LEVELS: tuple[Quantization, ...] = tuple(q for q in get_args(Quantization) if q != "off")
# The tensor type each level stores most weights in, and its llama_ftype (llama.h).
LEVEL_TYPES: dict[Quantization, str] = {
    "f16": "F16", "q8_0": "Q8_0", "q6_k": "Q6_K", "q5_k_m": "Q5_K", "q5_1": "Q5_1",
    "q5_0": "Q5_0", "q4_k_m": "Q4_K", "q4_1": "Q4_1", "q4_0": "Q4_0",
}  # fmt: skip
FTYPES: dict[Quantization, int] = {
    "f16": 1, "q4_0": 2, "q4_1": 3, "q8_0": 7, "q5_0": 8, "q5_1": 9,
    "q4_k_m": 15, "q5_k_m": 17, "q6_k": 18,
}  # fmt: skip
K_BLOCK = 256
SUMS = ".json"


@dataclass(frozen=True, slots=True)
class Built:
    path: Path
    size: int
    sha256: str
    types: dict[str, int]  # tensor type -> how many tensors have it


def producible(info: GGUFInfo) -> tuple[Quantization, ...]:
    """The levels `info`'s file can be turned into, most precise first."""
    return tuple(level for level in LEVELS if refusal(info, level) is None)


def check_level(info: GGUFInfo, level: Quantization, *, source: Path, where: str) -> None:
    """Raise a ConfigError naming the possible levels if `source` cannot give `level`."""
    reason = refusal(info, level)
    if reason is not None:
        can = ", ".join(producible(info)) or "none"
        raise ConfigError(f"{where}: {source.name} cannot be quantized to {level}: {reason}. "
                          f"Levels it can give: {can} (or 'off' to load it as it is)")  # fmt: skip


def k_share(info: GGUFInfo) -> float:
    """The share of the matrices' weights whose rows fit K-quant blocks."""
    total = fits = 0
    for tensor in info.matrices:
        elements = _elements(tensor.shape)
        total += elements
        fits += elements if tensor.shape[0] % K_BLOCK == 0 else 0
    return fits / total if total else 0.0


def refusal(info: GGUFInfo, level: Quantization) -> str | None:
    """Why `info`'s file cannot give `level`, or None when it can."""
    source_type = info.weight_type
    if level == "f16" and source_type not in FLOAT_TYPES:
        return (f"its weights are already {source_type}, and an F16 copy would only be larger; "
                "f16 needs an F32/F16/BF16 source")  # fmt: skip
    if LEVEL_TYPES[level].endswith("_K") and k_share(info) == 0:
        rows = sorted({t.shape[0] for t in info.matrices})[:4]
        return (f"no matrix has rows that are a multiple of {K_BLOCK} (row lengths {rows}), "
                "so every tensor would fall back to another type")  # fmt: skip
    return None


def _elements(shape: tuple[int, ...]) -> int:
    count = 1
    for dim in shape:
        count *= dim
    return count


def cached_model(
    source: Path, level: Quantization, *, cache_dir: Path, threads: int | None, where: str
) -> Path:
    """`source` at `level`: the checked copy in `cache_dir`, built first when missing or
    damaged; the source itself when it already is that level. If the cache cannot be written
    the source is used as it is, with a warning: a slower start beats no start."""
    info = read_gguf(source, where=where)
    check_level(info, level, source=source, where=where)
    if info.weight_type == LEVEL_TYPES[level]:
        return source
    target = target_path(source, level, cache_dir)
    if verified(target):
        return target
    try:
        return build(source, level, target, threads=threads).path
    except OSError as exc:
        log.warning("quantizing %s to %s failed (%s); using it as it is", source, level, exc)
        return source


def target_path(source: Path, level: Quantization, cache_dir: Path) -> Path:
    """Where `source` at `level` is kept: named after the source's path, size and modification
    time, so a changed source is quantized again and an unchanged one never."""
    stat = source.stat()
    tag = hashlib.sha256(f"{source.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return cache_dir / "models" / f"{source.stem}.{tag.hexdigest()[:12]}.{level}.gguf"


def verified(target: Path) -> bool:
    """Whether `target` is exactly what its build wrote (size, then SHA-256). A file without
    its sums, or not matching them, is deleted so it is rebuilt."""
    sums = target.with_suffix(SUMS)
    if not target.is_file():
        return False
    try:
        recorded = json.loads(sums.read_text())
        good = bool(
            target.stat().st_size == recorded["size"] and _sha256(target) == recorded["sha256"]
        )
    except (OSError, ValueError, KeyError, TypeError):
        good = False
    if not good:
        log.warning("the cached model %s is damaged or incomplete; building it again", target)
        for path in (target, sums):
            with contextlib.suppress(OSError):
                path.unlink()
    return good


def build(source: Path, level: Quantization, target: Path, *, threads: int | None) -> Built:
    """Quantize `source` to `level` at `target`, then record its size and SHA-256 beside it.
    The file appears under its name only once complete; the sums are written after it, so a
    crash between the two leaves a file without sums, which `verified` rebuilds."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(f".{os.getpid()}.partial")
    try:
        _quantize(source, partial, level, threads)
        partial.replace(target)
    finally:
        with contextlib.suppress(OSError):
            partial.unlink()
    types = dict(Counter(t.type for t in read_gguf(target, where=str(target)).tensors))
    built = Built(target, target.stat().st_size, _sha256(target), types)
    sums = {"size": built.size, "sha256": built.sha256, "level": level, "types": types,
            "source": str(source)}  # fmt: skip
    staged = target.with_suffix(f".{os.getpid()}.sums")
    staged.write_text(json.dumps(sums, indent=1))
    staged.replace(target.with_suffix(SUMS))
    return built


def recorded(target: Path) -> Built:
    """The sums a finished build recorded for `target` (after `verified`)."""
    sums = json.loads(target.with_suffix(SUMS).read_text())
    return Built(target, int(sums["size"]), str(sums["sha256"]), dict(sums["types"]))


def _sha256(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _quantize(source: Path, target: Path, level: Quantization, threads: int | None) -> None:
    ll = import_llama()
    params = ll.llama_model_quantize_default_params()
    params.ftype = FTYPES[level]
    params.allow_requantize = True
    params.nthread = threads or os.cpu_count() or 1
    status = ll.llama_model_quantize(
        str(source).encode(), str(target).encode(), ctypes.byref(params)
    )
    if status != 0:
        raise OSError(f"llama_model_quantize returned {status}")
