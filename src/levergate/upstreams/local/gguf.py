"""What a GGUF file holds, read from its header alone: its tensors (name, shape, type) and the
few metadata values the engine decides on, before llama.cpp is asked to load anything.

The quantization lever needs it: whether a level can be produced from a source depends on the
source's weight types and on the shapes of its matrices (K-quants pack rows in blocks of 256, so
a matrix whose rows are not a multiple of 256 falls back to another type). llama-cpp-python
binds llama.h, not gguf.h, so the header is parsed here: a few dozen lines of the format's
version 2/3 layout, every count and length bounded by the file's own size, so a damaged or
hostile file is a `ConfigError`, never a huge allocation.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

from levergate.errors import ConfigError

# ggml_type ids (ggml.h) of the types the engine names; others print as `type<N>`.
TYPE_NAMES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0", 9: "Q8_1",
    10: "Q2_K", 11: "Q3_K", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 15: "Q8_K", 30: "BF16",
}  # fmt: skip
FLOAT_TYPES = frozenset({"F32", "F16", "BF16"})
# Sizes of the fixed-width metadata value types (gguf_type 0..12; 8 is a string, 9 an array).
_SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9
MAX_DIMS = 4


@dataclass(frozen=True, slots=True)
class Tensor:
    name: str
    shape: tuple[int, ...]  # ggml order: shape[0] is the row length
    type: str

    @property
    def is_matrix(self) -> bool:
        return len(self.shape) >= 2 and self.shape[1] > 1


@dataclass(frozen=True, slots=True)
class GGUFInfo:
    tensors: tuple[Tensor, ...]
    architecture: str

    @property
    def matrices(self) -> tuple[Tensor, ...]:
        return tuple(t for t in self.tensors if t.is_matrix)

    @property
    def weight_type(self) -> str:
        """The type most of the matrices' weights are stored in (by element count)."""
        counts: dict[str, int] = {}
        for tensor in self.matrices:
            elements = 1
            for dim in tensor.shape:
                elements *= dim
            counts[tensor.type] = counts.get(tensor.type, 0) + elements
        return max(counts, key=lambda t: counts[t]) if counts else "F32"


class _Reader:
    def __init__(self, data: mmap.mmap, where: str) -> None:
        self._data = data
        self._at = 0
        self._where = where

    def take(self, size: int) -> bytes:
        if size < 0 or self._at + size > len(self._data):
            raise ConfigError(f"{self._where}: a corrupt or truncated GGUF file (its header)")
        chunk = self._data[self._at : self._at + size]
        self._at += size
        return chunk

    def u32(self) -> int:
        value: int = struct.unpack("<I", self.take(4))[0]
        return value

    def u64(self) -> int:
        value: int = struct.unpack("<Q", self.take(8))[0]
        return value

    def string(self) -> str:
        return self.take(self.u64()).decode(errors="replace")

    def skip_value(self, kind: int, *, depth: int = 0) -> None:
        if kind in _SCALAR:
            self.take(_SCALAR[kind])
        elif kind == _STRING:
            self.take(self.u64())
        elif kind == _ARRAY and depth == 0:
            inner, count = self.u32(), self.u64()
            if inner in _SCALAR:
                self.take(_SCALAR[inner] * count)
            else:
                for _ in range(count):
                    self.skip_value(inner, depth=1)
        else:
            raise ConfigError(f"{self._where}: a corrupt or truncated GGUF file (type {kind})")


def read_gguf(path: Path, *, where: str) -> GGUFInfo:
    """The tensors and architecture of the GGUF file at `path` (header only; the weights are
    not read)."""
    try:
        with path.open("rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as m:
            return _parse(_Reader(m, where), size=len(m), where=where)
    except (OSError, ValueError) as exc:  # unreadable, or empty (mmap refuses 0 bytes)
        raise ConfigError(f"{where}: cannot read {path}: {exc}") from None


def _parse(reader: _Reader, *, size: int, where: str) -> GGUFInfo:
    if reader.take(4) != b"GGUF" or reader.u32() not in (2, 3):
        raise ConfigError(f"{where}: a corrupt or truncated GGUF file (not version 2 or 3)")
    n_tensors, n_meta = reader.u64(), reader.u64()
    if n_tensors > size // 16 or n_meta > size // 12:  # each needs at least that many bytes
        raise ConfigError(f"{where}: a corrupt or truncated GGUF file (impossible counts)")
    architecture = ""
    for _ in range(n_meta):
        key, kind = reader.string(), reader.u32()
        if key == "general.architecture" and kind == _STRING:
            architecture = reader.string()
        else:
            reader.skip_value(kind)
    tensors = []
    for _ in range(n_tensors):
        name, dims = reader.string(), reader.u32()
        if not 0 < dims <= MAX_DIMS:
            raise ConfigError(f"{where}: a corrupt or truncated GGUF file ({dims} dimensions)")
        shape = tuple(reader.u64() for _ in range(dims))
        kind = reader.u32()
        reader.u64()  # the data offset
        tensors.append(Tensor(name, shape, TYPE_NAMES.get(kind, f"type{kind}")))
    return GGUFInfo(tuple(tensors), architecture)
